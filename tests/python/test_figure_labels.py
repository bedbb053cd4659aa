"""The figure scripts read back the report's CSVs as text: the apostrophe the writer puts before a
field starting with = + - @ (a spreadsheet's formula guard) is not drawn as part of a label."""
import importlib.util
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "reports"))
spec = importlib.util.spec_from_file_location("plot_report", os.path.join(ROOT, "reports", "plot_report.py"))
plot_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_report)


def test_formula_guard_is_not_part_of_the_label(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text('recipe,note\n"\'+ int8 P 127","\'-x"\n"\'plain","\'=1"\n')
    rows = plot_report.read_csv(str(path))
    assert [r["recipe"] for r in rows] == ["+ int8 P 127", "'plain"]  # an apostrophe before a letter is the name's own
    assert [r["note"] for r in rows] == ["-x", "=1"]
