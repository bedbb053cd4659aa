#!/usr/bin/env python3
"""`mpirun -n R qattn run`: the sharded report equals the single-process one, file for file (results,
statistics, failed units, CSV, summary, figure data), for 1, 2 and 3 ranks (3 oversubscribes a
2-core machine); one rank killed with SIGKILL mid-run, then --resume with another number of ranks
(and without mpirun), gives the same report again: no unit lost, none repeated.
Usage: test_mpi.py QATTN MPIRUN"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

qattn, mpirun = sys.argv[1:3]
fails = []
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
# The report files a run writes; config.json differs by design (date, command line, ranks).
COMPARED = ["results.jsonl", "stats.jsonl", "failed.jsonl", "results.csv", "summary.md",
            "figures/p_mass_per_decade.csv", "figures/mass_flushed.csv", "figures/channel_outliers.csv"]


def mpi(n, *args):
    return [mpirun, "-n", str(n), "--oversubscribe", qattn, *args]


def same_report(a, b, what):
    for f in COMPARED:
        pa, pb = os.path.join(a, f), os.path.join(b, f)
        if not os.path.exists(pa) or not os.path.exists(pb) or open(pa, "rb").read() != open(pb, "rb").read():
            fails.append(f"{what}: {f} differs from the single-process report")
    if os.path.exists(os.path.join(b, "shards")):
        fails.append(f"{what}: shards/ left behind")


def rank_pid(parent, rank):
    """The pid of the qattn process of `rank` started by mpirun `parent`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if ppid == parent and f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(pid)
    return None


with tempfile.TemporaryDirectory() as tmp:
    dump = os.path.join(tmp, "d.h5")
    subprocess.run([qattn, "synth", "--out", dump, "--tokens", "512", "--dim", "64", "--q-heads", "4", "--kv-heads", "2", "--layers", "3"],
                   check=True, capture_output=True)
    exp = {"name": "mpi", "dataset": dump, "selection": {"layers": "all", "contexts": [128, 256, 512], "rows": 128}, "kl_rows": 8,
           "recipes": {"fp16": "q=fp16 k=fp16 p=fp16 v=fp16",
                       "int8 e4m3": "q=int8/token k=int8/token p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_mma",
                       "qflash": "q=int8/head k=int8/head v=int8/head p=int8/static:127 softmax=qflash acc.qk=exact acc.pv=exact",
                       # every P flushes: a failed unit per layer and context, merged like the rows
                       "flushed": "q=fp16 k=fp16 p=int8/static:0.5 v=fp16"},
           "statistics": {"p_formats": ["int8/static:127"]}}
    path = os.path.join(tmp, "e.json")

    def write(output):
        json.dump({**exp, "output": os.path.join(tmp, output)}, open(path, "w"))
        return os.path.join(tmp, output)

    single = write("single")
    r = subprocess.run([qattn, "run", path, "--quiet"], capture_output=True, text=True, env=env)
    if r.returncode != 0 or not open(os.path.join(single, "failed.jsonl")).read():
        fails.append(f"single-process run: {r.returncode} {r.stderr[-400:]}")
    # Only `run` shards; another command under mpirun is refused once, not run once per rank.
    r = subprocess.run(mpi(2, "inspect", dump), capture_output=True, text=True, env=env)
    if r.returncode == 0 or r.stderr.count("inspect runs as one process; only `qattn run` shards") != 1:
        fails.append(f"inspect under mpirun -n 2: {r.returncode} {r.stderr[-300:]}")
    units = 3 * 3 * 4
    for n in (1, 2, 3):
        out = write(f"ranks{n}")
        r = subprocess.run(mpi(n, "run", path, "--quiet"), capture_output=True, text=True, env=env)
        if r.returncode != 0 or f"{units} units to run over {n} ranks" not in r.stdout:
            fails.append(f"mpirun -n {n}: {r.returncode} {r.stdout[-300:]} {r.stderr[-400:]}")
        same_report(single, out, f"mpirun -n {n}")

    # Kill rank 0 of 2 once both shards hold a unit (rank 1 may finish its share: the report then has
    # a hole in the middle of the plan, which the resumed run fills), then resume over 3 ranks and
    # over one process.
    for resume_with in (3, 0):  # 0: a single process, without mpirun
        out = write(f"killed-then-{resume_with}")
        p = subprocess.Popen(mpi(2, "run", path, "--quiet"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        shards = [os.path.join(out, "shards", f"rank-{r}", "results.jsonl") for r in (0, 1)]
        killed = False
        deadline = time.time() + 120
        while p.poll() is None and time.time() < deadline:
            if all(os.path.exists(f) and open(f).read().count("\n") >= 1 for f in shards):
                pid = rank_pid(p.pid, 0)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                    break
            time.sleep(0.01)
        p.wait(timeout=120)
        if not killed or p.returncode == 0:
            fails.append(f"could not kill rank 0 mid-run (killed={killed}, mpirun rc={p.returncode})")
            continue
        done = sum(open(os.path.join(root, f)).read().count("\n") for root, _, files in os.walk(out) for f in files if f == "results.jsonl")
        if done >= units * 4:  # rows: 4 heads per unit
            fails.append("the killed run had finished every unit; the kill tested nothing")
        cmd = mpi(resume_with, "run", path, "--resume") if resume_with else [qattn, "run", path, "--resume"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0 or "already in the report" not in r.stdout or "merged" not in r.stderr:
            fails.append(f"resume with {resume_with or 'one process'}: {r.returncode} {r.stdout[-300:]} {r.stderr[-400:]}")
        same_report(single, out, f"killed at 2 ranks, resumed with {resume_with or 'one process'}")

print("\n".join(fails) if fails else "ok")
sys.exit(1 if fails else 0)
