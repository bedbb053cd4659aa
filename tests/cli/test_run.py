#!/usr/bin/env python3
"""`qattn run`: an interrupted run (its log cut after a few units, with a torn last line) resumed
with --resume gives exactly the rows of an uninterrupted run; an existing report folder is refused
without --resume or --force; config mistakes are one clear error each, before any work.
Usage: test_run.py QATTN DUMP"""
import json
import os
import subprocess
import sys
import tempfile

qattn, dump = sys.argv[1:3]
fails = []


def run(*args):
    return subprocess.run([qattn, "run", *args], capture_output=True, text=True)


def rows(folder):
    with open(os.path.join(folder, "results.jsonl")) as f:
        return sorted(f.read().splitlines())


with tempfile.TemporaryDirectory() as tmp:
    exp = {
        "name": "resume-test", "dataset": dump,
        "selection": {"layers": [0, 29], "heads": [0, 4], "contexts": [256, 512], "rows": 64},
        "kl_rows": 4,
        "recipes": {"int8 P": "q=int8/token k=int8/token acc.qk=exact p=int8/static:127", "bf16": "q=bf16 k=bf16 p=bf16 v=bf16"},
        "sweep": {"base": "q=int8/token k=int8/token acc.qk=exact", "vary": {"p": ["e4m3/static:448", "e4m3fnuz/static:240"]}},
        "statistics": {"p_formats": ["int8/static:127", "e4m3/static:448"]},
        "output": os.path.join(tmp, "full"),
    }
    path = os.path.join(tmp, "exp.json")
    json.dump(exp, open(path, "w"))
    r = run(path)
    if r.returncode != 0:
        fails.append(f"full run failed: {r.stderr}")
    full = rows(exp["output"])
    if len(full) != 2 * 2 * 4 * 2:  # layers x contexts x recipes x heads
        fails.append(f"full run has {len(full)} rows, expected 32")
    for name in ("config.json", "results.csv", "summary.md", "stats.jsonl", "figures/p_mass_per_decade.csv",
                 "figures/mass_flushed.csv", "figures/channel_outliers.csv"):
        if not os.path.exists(os.path.join(exp["output"], name)):
            fails.append(f"missing {name}")

    # Interrupted: the first 3 units (2 head rows each) survive, plus a torn half line.
    exp["output"] = os.path.join(tmp, "cut")
    json.dump(exp, open(path, "w"))
    run(path)
    log = os.path.join(exp["output"], "results.jsonl")
    lines = open(log).read().splitlines(keepends=True)
    open(log, "w").write("".join(lines[:6]) + lines[6][: len(lines[6]) // 2])
    r = run(path)
    if r.returncode == 0 or "pass --resume to complete it or --force to replace it" not in r.stderr:
        fails.append(f"existing folder not refused: {r.returncode} {r.stderr}")
    r = run(path, "--resume")
    if r.returncode != 0 or "13 units to run (3 already in the report)" not in r.stdout:
        fails.append(f"resume: {r.returncode} {r.stdout[:300]} {r.stderr}")
    if rows(exp["output"]) != full:
        fails.append("resumed rows differ from the uninterrupted run's")

    # Config mistakes: one clear error each, before any work.
    def expect_error(edit, message):
        bad = json.loads(json.dumps(exp))
        bad["output"] = os.path.join(tmp, "bad")
        edit(bad)
        json.dump(bad, open(path, "w"))
        r = run(path)
        if r.returncode == 0 or message not in r.stderr:
            fails.append(f"expected error containing {message!r}, got {r.returncode}: {r.stderr.strip()}")
        if os.path.exists(bad["output"]):
            fails.append(f"work started before the error {message!r}")

    expect_error(lambda b: b.update(colour="red"), "exp.json: colour: unknown key; expected one of:")
    expect_error(lambda b: b["selection"].update(layer=[1]), "exp.json: selection.layer: unknown key")
    expect_error(lambda b: b["recipes"].update({"bad": "q=int8/token k=int8/token p=e4m4/static:448"}),
                 "exp.json: recipes.bad: recipe string: token 'p=e4m4/static:448': unknown format 'e4m4'; expected one of: fp32")
    expect_error(lambda b: b.update(dataset="/nonexistent.h5"), "/nonexistent.h5: no such file")
    expect_error(lambda b: b["selection"].update(contexts=[4096]), "selection.contexts: 4096 tokens asked")
    expect_error(lambda b: b["selection"].update(layers=[3]), "/layers/3: no such layer; the file has layers 0, 7, 15, 22, 29")
    expect_error(lambda b: b["statistics"].update(p_formats=["e4m3/token"]), "statistics.p_formats[0]: 'e4m3/token': expected FORMAT/static:S")
    expect_error(lambda b: b.update(output="/proc/qattn-cannot-write/report"), "/proc/qattn-cannot-write/report: cannot create or write the report folder")

print("\n".join(fails) if fails else "ok")
sys.exit(1 if fails else 0)
