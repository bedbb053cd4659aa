"""scripts/profile_gpu.py's table: rows assigned by launch order, the warm launch of each run kept,
ours split against FA3 into an instruction ratio and an issue-rate ratio (CSVs laid out as ncu's
raw page: a header row, a units row, one row per launch)."""
import csv
import importlib.util
import os

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("profile_gpu", os.path.join(ROOT, "scripts", "profile_gpu.py"))
profile_gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(profile_gpu)

COLUMNS = ["ID", "Kernel Name", "gpu__time_duration.sum", "sm__inst_executed.sum",
           "smsp__issue_active.avg.pct_of_peak_sustained_active",
           "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"]


def ours_name(qk, pv, bc, per_tile):
    return (f"void qattn::gpu::(anonymous namespace)::flash_wgmma_kernel<(qattn::gpu::QkType){qk}, "
            f"(qattn::gpu::PvType){pv}, 128, {bc}, {'true' if per_tile else 'false'}, false, "
            f"{'true' if per_tile else 'false'}>(qattn::gpu::(anonymous namespace)::TileMaps, "
            f"qattn::gpu::(anonymous namespace)::Params)")


FORMS = [(0, 0, 64, True), (0, 0, 64, False), (0, 0, 128, True), (0, 0, 128, False), (1, 1, 64, True), (2, 2, 64, True)]
FA3 = ["void cutlass::device_kernel<flash::FlashAttnFwdSm90<cutlass::float_e4m3_t, {c}>>(Params)",
       "void cutlass::device_kernel<flash::FlashAttnFwdSm90<cutlass::bfloat16_t, {c}>>(Params)"]


def write(path, launches):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerow(["", "", "nsecond", "inst", "%", "", ""])
        for i, (name, ns, inst, issue) in enumerate(launches):
            w.writerow([i, name, f"{ns:,}", f"{inst:,}", issue, 1.25, 0.5])


def ours_launches(warm_ns):
    out = []
    for causal in (False, True):
        for k, form in enumerate(FORMS):
            name = ours_name(*form)
            # Three warm-ups (slower, as a cold launch is) before the timed one: only the last counts.
            out += [(name, 9_000_000, 4_000_000_000, 30.0)] * 3
            out.append((name, warm_ns[k] // (2 if causal else 1), 3_000_000_000 // (2 if causal else 1), 47.0))
    return out


def test_table_pairs_each_form_with_fa3(tmp_path):
    write(tmp_path / "ours-d128-n16384.csv", ours_launches([8_650_000, 7_400_000, 7_050_000, 6_770_000, 9_000_000, 9_100_000]))
    fa3 = []
    for c in ("false", "true"):
        for k, name in enumerate(FA3):
            div = 2 if c == "true" else 1
            fa3 += [(name.format(c=c), 9_000_000, 2_000_000_000, 40.0),
                    (name.format(c=c), (4_900_000 if k == 0 else 6_300_000) // div, 1_830_000_000 // div, 43.7)]
    write(tmp_path / "fa3-d128-n16384.csv", fa3)
    assert profile_gpu.table(str(tmp_path)) == 0
    text = (tmp_path / "profile.md").read_text()
    # The warm launch of the into-O 128-key form against FA3 fp8: 6.77 / 4.90 ms, 3.00 / 1.83 G
    # instructions, 43.7 / 47.0 of the issue slots (two decimals, as printed).
    line = next(l for l in text.splitlines() if l.startswith("| 128, 16384, full | int8-QK+e4m3-PV, 128 keys, into O"))
    assert "| 6.770 | 3.00 |" in line
    assert "1.38 = 1.64 x 0.93 (FA3 fp8)" in line
    # Instructions per score: 3.0e9 warp instructions x 32 threads over 32 x 16384^2 scores.
    assert f"| {3.0e9 * 32 / (32 * 16384 ** 2):.2f} |" in line
    # The causal half keeps its own launches (half the time), and the 16-bit forms go against FA3 bf16.
    causal = next(l for l in text.splitlines() if l.startswith("| 128, 16384, causal | fp16-QK+fp16-PV, 64 keys, per tile"))
    assert "| 4.500 |" in causal and "(FA3 bf16)" in causal
    assert "wait 1.25, long_scoreboard 0.50" in line


def test_table_refuses_rows_it_cannot_assign(tmp_path):
    launches = ours_launches([1_000_000] * 6)
    write(tmp_path / "ours-d64-n4096.csv", launches[:-4])  # one form of the causal half missing
    with pytest.raises(ValueError, match="expected 12 runs of flash_wgmma_kernel"):
        profile_gpu.table(str(tmp_path))


def test_table_checks_fa3_order(tmp_path):
    fa3 = [(FA3[1].format(c="false"), 1, 1, 1.0), (FA3[0].format(c="false"), 1, 1, 1.0),
           (FA3[1].format(c="true"), 1, 1, 1.0), (FA3[0].format(c="true"), 1, 1, 1.0)]
    write(tmp_path / "fa3-d64-n4096.csv", fa3)
    with pytest.raises(ValueError, match="fp8"):
        profile_gpu.table(str(tmp_path))


def table_cli(directory):
    import subprocess
    import sys
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "profile_gpu.py"), "table", str(directory)], capture_output=True, text=True)


def test_table_errors_are_one_line_not_a_traceback(tmp_path):
    # A row of zero tokens (a file named n0) would divide by zero.
    (tmp_path / "zero").mkdir()
    write(tmp_path / "zero" / "ours-d64-n0.csv", ours_launches([1_000_000] * 6))
    # A field past csv's limit (128 KiB) is not ncu's output.
    (tmp_path / "huge").mkdir()
    with open(tmp_path / "huge" / "ours-d64-n64.csv", "w") as f:
        f.write(",".join(COLUMNS) + "\n" + "1," + "x" * (1 << 18) + "\n")
    # A launch without a metric the table reads.
    (tmp_path / "metric").mkdir()
    with open(tmp_path / "metric" / "decode.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ID", "Kernel Name"])
        for i in range(len(profile_gpu.DECODE_V)):  # one run per V format, distinct names
            w.writerow([i, f"void qattn::gpu::decode_fast_split_kernel<{i}>(Params)"])
    for case, message in (("zero", "ours-d64-n0.csv: head dim 64, 0 tokens; expected both positive"),
                          ("huge", "ours-d64-n64.csv: not a CSV of ncu's raw page"),
                          ("metric", "lacks the metric")):
        p = table_cli(tmp_path / case)
        assert p.returncode == 1 and message in p.stderr and "Traceback" not in p.stderr, (case, p.stderr)
