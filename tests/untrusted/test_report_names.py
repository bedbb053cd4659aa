"""Names from outside (a kernel named by an outputs file, a recipe named by an experiment) with
quotes, commas, line breaks, | and a leading = stay one field: results.csv and the figure CSVs
parse to one header's width on every row, summary.md's tables keep their column count, and the
figures are drawn."""
import csv
import json
import os
import re
import subprocess

import numpy as np

import qattn

NAMES = ['k "quoted", with commas', "two\nlines|and a pipe", "=1+1", "tick`s and ``runs``"]


def parse_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    widths = {len(r) for r in rows}
    assert len(widths) == 1, f"{path}: rows of {sorted(widths)} fields"
    return rows


def table_widths(md):
    """Cells per table row, counting only unescaped | outside nothing (GFM splits on them even in code spans)."""
    return {len(re.findall(r"(?<!\\)\|", line)) for line in md.splitlines() if line.startswith("|")}


def test_kernel_names_in_score_reports(dump, qattn_exe, tmp_path):
    d = qattn.load_layer(dump, "0", tokens=64)
    ref = qattn.reference(d["q"], d["k"], d["v"], causal=True)["out"].astype(np.float32)
    files = []
    for i, name in enumerate(NAMES):
        files.append(str(tmp_path / f"k{i}.h5"))
        qattn.write_outputs(files[-1], name, [{"layer": "0", "o": ref}])
    out = str(tmp_path / "score")
    r = subprocess.run([qattn_exe, "score", dump, *files, "-o", out, "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = parse_csv(os.path.join(out, "results.csv"))
    kernels = {r[3] for r in rows[1:]}
    assert kernels == {n if not n.startswith("=") else "'" + n for n in NAMES}, kernels
    parse_csv(os.path.join(out, "figures", "score_per_head.csv"))
    assert len(table_widths(open(os.path.join(out, "summary.md")).read())) == 1
    assert os.path.exists(os.path.join(out, "figures", "score_per_head.png"))


def test_recipe_names_in_run_reports(dump, qattn_exe, tmp_path):
    exp = {"name": "names | and `ticks`", "dataset": dump,
           "selection": {"layers": [0], "heads": [0], "contexts": [64, 128], "rows": 16},
           "recipes": {n: "q=int8/token k=int8/token" for n in NAMES}, "output": str(tmp_path / "run")}
    (tmp_path / "exp.json").write_text(json.dumps(exp))
    r = subprocess.run([qattn_exe, "run", str(tmp_path / "exp.json"), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = parse_csv(os.path.join(exp["output"], "results.csv"))
    assert {r[3] for r in rows[1:]} == {n if not n.startswith("=") else "'" + n for n in NAMES}
    for f in ("p_mass_per_decade.csv", "mass_flushed.csv", "channel_outliers.csv"):
        parse_csv(os.path.join(exp["output"], "figures", f))
    md = open(os.path.join(exp["output"], "summary.md")).read()
    tables = [t for t in md.split("\n\n") if t.startswith("|")]
    assert len(tables) == 2 and all(len(table_widths(t)) == 1 for t in tables), md
    assert md.startswith("# names \\| and \\`ticks\\`\n"), md[:80]
