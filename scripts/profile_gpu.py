#!/usr/bin/env python3
"""Where the time goes, row by row of `qattn bench gpu`: Nsight Compute (ncu) over the lab's wgmma
kernels, FlashAttention-3's forward (fp8 and bf16) and the decode fast path, then one table that
puts each of our forms beside FA3 on the same row (instructions, issue slots, stall reasons, pipes).

    python3 scripts/profile_gpu.py collect --qattn build-gpu/harness/qattn --out DIR [--tokens 4096,16384] [--head-dims 128,64]
    python3 scripts/profile_gpu.py table DIR           # (re)writes DIR/profile.md from DIR/*.csv; no GPU needed

collect runs, per (d, N), `qattn bench gpu --reps 1` and `scripts/bench_sdpa.py --backends
fa3_fp8,fa3_bf16 --reps 1 --warmup 1 --sets 1` under ncu (one report each, exported as CSV), then
`qattn bench gpu` once more for the decode kernels; FA3 needs `import fa3_fwd_interface` (the wheel
from scripts/fetch-peers.sh). Every launch of a profiled kernel is measured (the bench's warm-up
launches too); the table keeps the last launch of each run of identical kernels (a warm one).
Rows are assigned by launch order, which both benches fix (d, then N, then full before causal; per
row ours in the bench's column order, FA3 fp8 before bf16; decode e4m3, q8_0, q4_0), and checked:
the causal half must repeat the full half's kernel names, FA3's fp8 kernels must name e4m3.

Why the metrics (a kernel's time is its warp instructions over the rate it issues them):
t = instructions / (issue slots busy x schedulers x clock), so ours against FA3's on one row splits
into an instruction ratio and an issue-rate ratio, both measured; the stall reasons say why issue
slots sit idle (cycles per issued instruction, ncu's smsp__average_warps_issue_stalled_*).
"""
import argparse
import csv
import os
import re
import subprocess
import sys

METRICS = ",".join([
    "gpu__time_duration.sum",
    "sm__inst_executed.sum",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_elapsed.avg.per_second",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
    r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio",
    r"regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active",
])
BATCH, HEADS = 1, 32                       # the prefill shapes of `qattn bench gpu` (B=1, H=32)
QK = {"0": "int8", "1": "fp16", "2": "bf16"}  # QkType / PvType enumerator order (flash_mma.hpp)
PV = {"0": "e4m3", "1": "fp16", "2": "bf16"}
DECODE_V = ("e4m3", "q8_0", "q4_0")        # kDecodeFormats' order in `qattn bench gpu`
OURS_FORMS = 6                              # wgmma columns per row of `qattn bench gpu`


def run(cmd, log):
    """Runs an argument vector, its output into `log`; raises with the log's tail when it fails."""
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        with open(log) as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"{cmd[0]} exited with {rc} (log {log}):\n{tail}")


def ncu_to_csv(ncu, report, out_csv):
    """Exports an ncu report's raw page (base units, demangled names) as CSV, atomically."""
    tmp = out_csv + ".tmp"
    with open(tmp, "w") as f:
        rc = subprocess.run([ncu, "--import", report, "--csv", "--page", "raw", "--print-units", "base",
                             "--kernel-name-base", "demangled"], stdout=f).returncode
    if rc != 0:
        raise RuntimeError(f"ncu --import {report} exited with {rc}")
    os.replace(tmp, out_csv)


def collect(args):
    os.makedirs(args.out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    prof = [args.ncu, "--clock-control", "none", "--metrics", METRICS, "-f"]
    jobs = []
    for d in args.head_dims:
        for n in args.tokens:
            jobs.append((f"ours-d{d}-n{n}", ["-k", "regex:flash_wgmma_kernel"],
                         [args.qattn, "bench", "gpu", "--reps", "1", "--tokens", str(n), "--head-dims", str(d)]))
            if not args.no_fa3:
                # FA3's kernels are cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>; no other
                # kernel of that name runs in a bench_sdpa.py restricted to FA3.
                jobs.append((f"fa3-d{d}-n{n}", ["-k", "regex:device_kernel"],
                             [args.python, os.path.join(here, "bench_sdpa.py"), "--backends", "fa3_fp8,fa3_bf16",
                              "--reps", "1", "--warmup", "1", "--sets", "1", "--tokens", str(n), "--head-dims", str(d),
                              "--out", os.path.join(args.out, f"fa3-d{d}-n{n}.json")]))
    # Decode: the prefill rows of this call are small and not profiled.
    jobs.append(("decode", ["-k", "regex:decode_fast_split_kernel"],
                 [args.qattn, "bench", "gpu", "--reps", "1", "--tokens", "256", "--head-dims", "64"]))
    for name, select, cmd in jobs:
        report = os.path.join(args.out, name)
        print(f"profile_gpu: {name}", flush=True)
        run(prof + select + ["-o", report] + cmd, os.path.join(args.out, name + ".log"))
        ncu_to_csv(args.ncu, report + ".ncu-rep", os.path.join(args.out, name + ".csv"))
    return table(args.out)


# ---- the table (no GPU) ----

def number(text):
    t = (text or "").replace(",", "").strip()
    try:
        return float(t)
    except ValueError:
        return None


def read_launches(path):
    """The launches of one CSV from `ncu --page raw --csv` (a header row, a units row, one row per
    launch), as dicts of the kernel's name and its numeric metrics."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except csv.Error as e:  # a field past csv's limit, a NUL byte: not ncu's output
        raise ValueError(f"{path}: not a CSV of ncu's raw page ({e})") from None
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        raise ValueError(f"{path}: no 'Kernel Name' column: not a CSV of ncu's raw page")
    head = rows[start]
    launches = []
    for r in rows[start + 1:]:
        if len(r) != len(head) or not r[0].strip().isdigit():
            continue  # the units row, ncu's own messages
        row = dict(zip(head, r))
        launch = {"name": row["Kernel Name"]}
        for k, v in row.items():
            x = number(v)
            if x is not None:
                launch[k] = x
        launches.append(launch)
    return launches


def last_of_runs(launches):
    """The last launch of each run of consecutive launches of one kernel (the bench's warm-ups come first)."""
    runs = []
    for x in launches:
        if runs and runs[-1][0] == x["name"]:
            runs[-1] = (x["name"], x)
        else:
            runs.append((x["name"], x))
    return [x for _, x in runs]


def wgmma_form(name):
    m = re.search(r"flash_wgmma_kernel<([^>]*)>", name)
    if not m:
        return None
    a = [s.strip() for s in m.group(1).split(",")]
    enum = lambda s: re.sub(r"\D", "", s.split(")")[-1]) or s  # "(qattn::gpu::QkType)0" -> "0"
    qk, pv, d, bc, per_tile = QK.get(enum(a[0]), a[0]), PV.get(enum(a[1]), a[1]), a[2], a[3], a[4] in ("true", "1")
    return f"{qk}-QK+{pv}-PV, {bc} keys, {'per tile' if per_tile else 'into O'}"


def split_rows(launches, per_row, what, path, same_names):
    """Runs of one bench call: the first half full, the second causal (the same kernels in each
    where causality is a run-time argument, as in ours; FA3 instantiates causal kernels apart)."""
    runs = last_of_runs(launches)
    if len(runs) != 2 * per_row:
        names = "\n  ".join(x["name"][:160] for x in runs)
        raise ValueError(f"{path}: expected {2 * per_row} runs of {what} (full, then causal), found {len(runs)}:\n  {names}")
    full, causal = runs[:per_row], runs[per_row:]
    for a, b in zip(full, causal):
        if same_names and a["name"] != b["name"]:
            raise ValueError(f"{path}: the causal half does not repeat the full half's kernels ({a['name'][:120]} / {b['name'][:120]})")
    return {False: full, True: causal}


def stalls(x, top=3):
    pre, post = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
    s = [(k[len(pre):-len(post)], v) for k, v in x.items() if k.startswith(pre) and k.endswith(post)]
    s.sort(key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.2f}" for k, v in s[:top]) if s else "-"


def pipes(x, top=3):
    pre, post = "sm__inst_executed_pipe_", ".avg.pct_of_peak_sustained_active"
    s = [(k[len(pre):-len(post)], v) for k, v in x.items() if k.startswith(pre) and k.endswith(post)]
    s.sort(key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.1f}" for k, v in s[:top]) if s else "-"


def scores(n, causal):
    s = BATCH * HEADS * n * float(n)
    return s / 2 if causal else s


def table(directory):
    files = sorted(f for f in os.listdir(directory) if f.endswith(".csv"))
    if not files:
        raise ValueError(f"{directory}: no CSV files (profile_gpu.py collect writes them)")
    ours, fa3, decode = {}, {}, None
    for f in files:
        path = os.path.join(directory, f)
        m = re.fullmatch(r"(ours|fa3)-d(\d+)-n(\d+)\.csv", f)
        launches = read_launches(path)
        if m:
            kind, d, n = m.group(1), int(m.group(2)), int(m.group(3))
            if d <= 0 or n <= 0:
                raise ValueError(f"{path}: head dim {d}, {n} tokens; expected both positive (the file name is d<dim>-n<tokens>)")
            if kind == "ours":
                for causal, runs in split_rows(launches, OURS_FORMS, "flash_wgmma_kernel", path, True).items():
                    ours[(d, n, causal)] = [(wgmma_form(x["name"]), x) for x in runs]
            else:
                for causal, runs in split_rows(launches, 2, "FA3 kernels (fp8, bf16)", path, False).items():
                    if not re.search(r"e4m3", runs[0]["name"]) or re.search(r"e4m3", runs[1]["name"]):
                        raise ValueError(f"{path}: FA3's first kernel of a row should be the fp8 (e4m3) one, the second bf16")
                    fa3[(d, n, causal)] = {"fp8": runs[0], "bf16": runs[1]}
        elif f == "decode.csv":
            runs = last_of_runs(launches)
            if len(runs) != len(DECODE_V):
                raise ValueError(f"{path}: expected {len(DECODE_V)} runs of decode_fast_split_kernel, found {len(runs)}")
            decode = list(zip(DECODE_V, runs))
    out = ["# Where the time goes: ncu per row of `qattn bench gpu`", "",
           "Made by `python3 scripts/profile_gpu.py collect` (ncu over one launch of each kernel after the bench's "
           "warm-ups, `--clock-control none`); the table from the CSVs beside this file. ms: ncu's gpu__time_duration; "
           "inst/score: warp instructions x 32 over the row's scores (B H N^2, halved when causal), every warp of the "
           "block counted; issue %: issue slots busy (smsp__issue_active); stalls: cycles per issued instruction by "
           "reason (the largest three); pipes: % of each pipe's peak issue rate (the largest three). "
           "vs FA3: our time over FA3's = (our instructions over FA3's) x (FA3's issue rate over ours), both measured "
           "(the clock is the same card's).", ""]
    if ours:
        out += ["| d, N, mask | kernel | ms | warp inst (G) | inst/score | issue % | occupancy % | regs | stalls (cycles/issue) | pipes (% peak) | time / FA3 = inst x issue |",
                "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
        for key in sorted(ours, key=lambda k: (-k[0], k[1], k[2])):
            d, n, causal = key
            row = f"{d}, {n}, {'causal' if causal else 'full'}"
            peers = fa3.get(key, {})
            entries = [(form, x, "fp8" if form.startswith("int8") else "bf16") for form, x in ours[key]]
            entries += [(f"FA3 {k}", x, None) for k, x in peers.items()]
            for form, x, ref in entries:
                t = x.get("gpu__time_duration.sum")
                inst = x.get("sm__inst_executed.sum")
                issue = x.get("smsp__issue_active.avg.pct_of_peak_sustained_active")
                vs = "-"
                p = peers.get(ref) if ref else None
                if p and t and inst and issue:
                    pt, pi, pis = p.get("gpu__time_duration.sum"), p.get("sm__inst_executed.sum"), p.get(
                        "smsp__issue_active.avg.pct_of_peak_sustained_active")
                    if pt and pi and pis:
                        vs = f"{t / pt:.2f} = {inst / pi:.2f} x {pis / issue:.2f} (FA3 {ref})"
                fmt = lambda v, f: "-" if v is None else f.format(v)
                out.append(f"| {row} | {form} | {fmt(t and t / 1e6, '{:.3f}')} | {fmt(inst and inst / 1e9, '{:.2f}')} | "
                           f"{fmt(inst and inst * 32 / scores(n, causal), '{:.2f}')} | {fmt(issue, '{:.1f}')} | "
                           f"{fmt(x.get('sm__warps_active.avg.pct_of_peak_sustained_active'), '{:.1f}')} | "
                           f"{fmt(x.get('launch__registers_per_thread'), '{:.0f}')} | {stalls(x)} | {pipes(x)} | {vs} |")
        out.append("")
    if decode:
        out += ["Decode fast path (B=8, Hq=32, Hkv=8, N=32768, d=128): DRAM % is dram__throughput of its peak over "
                "the launch.", "",
                "| V format | ms | DRAM % of peak | issue % | occupancy % | regs | stalls (cycles/issue) | pipes (% peak) |",
                "|---|---:|---:|---:|---:|---:|---|---|"]
        for v, x in decode:
            fmt = lambda k, f: "-" if x.get(k) is None else f.format(x[k])
            out.append(f"| {v} | {x['gpu__time_duration.sum'] / 1e6:.3f} | "
                       f"{fmt('dram__throughput.avg.pct_of_peak_sustained_elapsed', '{:.1f}')} | "
                       f"{fmt('smsp__issue_active.avg.pct_of_peak_sustained_active', '{:.1f}')} | "
                       f"{fmt('sm__warps_active.avg.pct_of_peak_sustained_active', '{:.1f}')} | "
                       f"{fmt('launch__registers_per_thread', '{:.0f}')} | {stalls(x)} | {pipes(x)} |")
        out.append("")
    text = "\n".join(out)
    path = os.path.join(directory, "profile.md")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print(text)
    return 0


def positive_ints(text):
    """argparse type: comma-separated integers >= 1, at least one."""
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers >= 1, comma separated") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one or more integers >= 1, comma separated")
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    c = sub.add_parser("collect", help="run ncu over the benches (GPU machine), then write the table")
    c.add_argument("--qattn", required=True, help="the CUDA build's qattn (build-gpu/harness/qattn)")
    c.add_argument("--out", required=True, help="folder for the reports, CSVs and profile.md")
    c.add_argument("--ncu", default="ncu")
    c.add_argument("--python", default=sys.executable, help="interpreter for scripts/bench_sdpa.py (torch, fa3-fwd)")
    c.add_argument("--tokens", type=positive_ints, default="4096,16384")
    c.add_argument("--head-dims", type=positive_ints, default="128,64")
    c.add_argument("--no-fa3", action="store_true", help="profile ours only")
    t = sub.add_parser("table", help="write DIR/profile.md from DIR/*.csv")
    t.add_argument("dir")
    args = ap.parse_args()
    try:
        if args.verb == "table":
            return table(args.dir)
        return collect(args)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"profile_gpu: error: {e}", file=sys.stderr)
        return 1
    except KeyError as e:
        print(f"profile_gpu: error: a launch in the CSVs lacks the metric {e.args[0]!r}; expected every metric `collect` asks ncu for",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
