#!/usr/bin/env python3
"""`qattn run`: an interrupted run (its log cut after a few units, with a torn last line) resumed
with --resume gives exactly the rows of an uninterrupted run; an existing report folder is refused
without --resume or --force; config mistakes are one clear error each, before any work.
Usage: test_run.py QATTN DUMP"""
import csv
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
    # Progress off a terminal: a line per unit on stderr with a cost-weighted ETA; stdout keeps the plan.
    if not any(x.startswith("[1/16] layer 0 ctx 256") and "(ETA " in x for x in r.stderr.splitlines()) or "[16/16]" not in r.stderr or "[1/16]" in r.stdout:
        fails.append(f"no progress lines on stderr: {r.stderr[:300]}")
    full = rows(exp["output"])
    if len(full) != 2 * 2 * 4 * 2:  # layers x contexts x recipes x heads
        fails.append(f"full run has {len(full)} rows, expected 32")
    for name in ("config.json", "results.csv", "summary.md", "stats.jsonl", "figures/p_mass_per_decade.csv",
                 "figures/mass_flushed.csv", "figures/channel_outliers.csv", "figures/sqnr_by_layer.csv", "figures/error_by_context.csv"):
        if not os.path.exists(os.path.join(exp["output"], name)):
            fails.append(f"missing {name}")
    # The figures draw the summary's own numbers: each (recipe, layer) cell of its by-layer table is the
    # figure data's mean SQNR, and each context's mean over its rows.
    summary = open(os.path.join(exp["output"], "summary.md")).read()
    table = summary.split("Mean SQNR dB by layer")[1].split("\n\n")[1].splitlines()
    layers = [h.strip().split()[1] for h in table[0].split("|")[2:-1]]  # "| recipe | layer 0 (dB) | ..."
    cells = {(line.split("|")[1].strip().strip("`"), layer): line.split("|")[2 + k].strip()
             for line in table[2:] for k, layer in enumerate(layers)}
    by_layer = list(csv.DictReader(open(os.path.join(exp["output"], "figures", "sqnr_by_layer.csv"))))
    if len(by_layer) != len(cells) or any(f"{float(r['mean_sqnr_db']):.2f}" != cells[(r["recipe"], r["layer"])] for r in by_layer):
        fails.append(f"sqnr_by_layer.csv differs from the summary's table: {by_layer} vs {cells}")
    by_context = list(csv.DictReader(open(os.path.join(exp["output"], "figures", "error_by_context.csv"))))
    for r in by_context:
        mine = [float(x["sqnr_db"]) for x in map(json.loads, full) if x["recipe"] == r["recipe"] and int(x["context"]) == int(r["context"])]
        if int(r["rows"]) != len(mine) or abs(float(r["mean_sqnr_db"]) - sum(mine) / len(mine)) > 1e-9 * abs(float(r["mean_sqnr_db"])):
            fails.append(f"error_by_context.csv's {r['recipe']} at {r['context']}: {r} vs the mean of {mine}")  # 1e-9: summation order only

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
    expect_error(lambda b: b.update(dataset="/nonexistent.h5"), "exp.json: dataset: '/nonexistent.h5': no such file")
    expect_error(lambda b: b["selection"].update(contexts=[4096]), "selection.contexts: 4096 tokens asked")
    expect_error(lambda b: b["selection"].update(layers=[3]), "/layers/3: no such layer; the file has layers 0, 7, 15, 22, 29")
    expect_error(lambda b: b["statistics"].update(p_formats=["e4m3/token"]), "statistics.p_formats[0]: 'e4m3/token': expected FORMAT/static:S")
    expect_error(lambda b: b.update(output="/proc/qattn-cannot-write/report"), "/proc/qattn-cannot-write/report: cannot create or write the report folder")

    # Duplicates and out-of-range integers: refused, never run twice or wrapped.
    expect_error(lambda b: b["selection"].update(layers=[0, 0]), "exp.json: selection.layers[1]: layer 0 is listed twice (also at [0])")
    expect_error(lambda b: b["selection"].update(contexts=[256, 256]), "exp.json: selection.contexts[1]: 256 is listed twice")
    expect_error(lambda b: b["selection"].update(contexts=[2 ** 32]), "selection.contexts[0]: expected positive token counts in 1..2147483647, got 4294967296")
    expect_error(lambda b: b["selection"].update(rows=1e20), "selection.rows: expected a row count (sampled query rows; 0 = all) in 0..2147483647")
    expect_error(lambda b: b["selection"].update(layers=[99999999999999999999]), "selection.layers[0]: expected a layer index or name, got 1e+20")
    expect_error(lambda b: b.update(seed=-1), "exp.json: seed: expected a non-negative integer, got -1")
    expect_error(lambda b: b.update(dataset="x" * 5000 + ".h5"), "exp.json: dataset: 'xxxxxxxx")
    expect_error(lambda b: b["selection"].update(contexts=[0]), "selection.contexts[0]: expected positive token counts in 1..2147483647, got 0")
    expect_error(lambda b: b["selection"].update(contexts={"from": 64, "to": 512, "factor": 1}), "selection.contexts.factor: expected an integer factor in 2..1024, got 1")
    expect_error(lambda b: b["selection"].update(contexts={"from": 0, "to": 512, "factor": 2}), "selection.contexts.from: expected a token count in 1..")
    expect_error(lambda b: b["selection"].update(contexts={"from": 512, "to": 64, "step": 64}), "selection.contexts.to: expected a token count >= from in 512..")
    expect_error(lambda b: b["selection"].update(contexts={"from": 64, "to": 512, "step": 0}), "selection.contexts.step: expected a token step in 1..")
    expect_error(lambda b: b["statistics"].update(p_formats=["e5m2fnuz/static:-nan"]), "statistics.p_formats[0]: ")
    expect_error(lambda b: b["statistics"].update(p_formats=["e5m2fnuz/static:-nan"]), "'-nan' is not a finite number")
    expect_error(lambda b: b["recipes"].update({"q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448": "q=fp16 k=fp16"}),
                 "the recipe 'q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448' is already in the experiment")
    nested = []
    for _ in range(70):
        nested = [nested]
    expect_error(lambda b: b.update(name=nested),
                 "exp.json: JSON nested more than 64 levels deep")
    deep = os.path.join(tmp, "deep.json")
    open(deep, "w").write('{"name": ' + "[" * 100000 + "]" * 100000 + "}")
    r = run(deep)
    if r.returncode != 1 or "deep.json: JSON nested more than 64 levels deep" not in r.stderr:
        fails.append(f"100,000-deep JSON: {r.returncode} {r.stderr[:200]}")

    # The report folder: --resume with --force, --force on what the lab did not write, a changed
    # experiment under --resume, and a second run on a locked folder are refused; nothing is removed.
    small = json.loads(json.dumps(exp))
    small["selection"] = {"layers": [0], "heads": [0], "contexts": [256], "rows": 32}
    small["output"] = os.path.join(tmp, "small")
    json.dump(small, open(path, "w"))
    r = run(path)
    if r.returncode != 0:
        fails.append(f"small run: {r.stderr}")
    r = run(path, "--resume", "--force")
    if r.returncode != 1 or "--resume and --force exclude each other" not in r.stderr:
        fails.append(f"--resume --force: {r.returncode} {r.stderr}")
    changed = json.loads(json.dumps(small))
    changed["recipes"]["bf16"] = "q=fp16 k=fp16 p=fp16 v=fp16"
    json.dump(changed, open(path, "w"))
    r = run(path, "--resume")
    if r.returncode != 1 or "the experiment changed since this report was written (recipes.bf16 (" not in r.stderr:
        fails.append(f"--resume after a recipe changed: {r.returncode} {r.stderr}")
    changed = json.loads(json.dumps(small))
    changed["selection"]["contexts"] = [512]
    json.dump(changed, open(path, "w"))
    r = run(path, "--resume")
    if r.returncode != 1 or "the experiment changed since this report was written (contexts)" not in r.stderr:
        fails.append(f"--resume after the contexts changed: {r.returncode} {r.stderr}")
    json.dump(small, open(path, "w"))
    import fcntl
    with open(os.path.join(small["output"], ".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = run(path, "--resume")
        if r.returncode != 1 or "another qattn command is writing this report folder" not in r.stderr:
            fails.append(f"locked folder: {r.returncode} {r.stderr}")
    r = run(path, "--resume")
    if r.returncode != 0 or "0 units to run" not in r.stdout:
        fails.append(f"resume after the lock was released: {r.returncode} {r.stdout[:200]} {r.stderr}")
    for target in ("user-folder", "data.h5"):
        victim = os.path.join(tmp, target)
        if target.endswith(".h5"):
            open(victim, "w").write("not a report")
        else:
            os.makedirs(victim)
            open(os.path.join(victim, "notes.txt"), "w").write("mine")
        small["output"] = victim
        json.dump(small, open(path, "w"))
        r = run(path, "--force")
        if r.returncode != 1 or "is not a report folder qattn wrote" not in r.stderr:
            fails.append(f"--force on {target}: {r.returncode} {r.stderr}")
        if not os.path.exists(victim if target.endswith(".h5") else os.path.join(victim, "notes.txt")):
            fails.append(f"--force removed {target}")

    # A recipe whose every P flushes (P = 1 at the row max times 0.5 rounds to int8 0 or 1; most rows
    # all zero: 0 / 0) has no number to report: the unit is recorded as failed with its reason.
    small["output"] = os.path.join(tmp, "flush")
    small["recipes"] = {"all P flushed": "q=fp32 k=fp32 p=int8/static:0.25", "fp16": "q=fp16 k=fp16 p=fp16 v=fp16"}
    small.pop("sweep")
    json.dump(small, open(path, "w"))
    r = run(path)
    failed = [json.loads(x) for x in open(os.path.join(small["output"], "failed.jsonl"))] if os.path.exists(os.path.join(small["output"], "failed.jsonl")) else []
    if r.returncode != 0 or len(failed) != 1 or failed[0]["recipe"] != "all P flushed" or "non-finite" not in failed[0]["reason"]:
        fails.append(f"flushed recipe not recorded as failed: {r.returncode} {failed} {r.stderr}")
    if "recipe 'all P flushed' failed:" not in r.stderr:
        fails.append(f"no warning for the failed unit: {r.stderr}")
    summary_rows = [x for x in open(os.path.join(small["output"], "summary.md")) if x.startswith("| `")]
    report_text = "".join(open(os.path.join(small["output"], f)).read() for f in ("results.jsonl", "results.csv")) + "".join(summary_rows)
    if "nan" in report_text.lower() or "all P flushed" not in open(os.path.join(small["output"], "summary.md")).read():
        fails.append("a NaN in the report, or the failed unit missing from summary.md")
    if sum(1 for _ in open(os.path.join(small["output"], "results.jsonl"))) != 1:
        fails.append("the failed unit has rows in results.jsonl")

    # Sweeps and selections: "layers": "all", a context range, zip lists beside a product, a key of
    # the base replaced by the sweep (and said so), the swept keys as CSV columns, per-layer and
    # per-context summaries.
    tiny = os.path.join(tmp, "tiny.h5")
    subprocess.run([qattn, "synth", "--out", tiny, "--tokens", "128", "--dim", "16", "--q-heads", "2", "--kv-heads", "1", "--layers", "2"],
                   check=True, capture_output=True)
    sweep = {"name": "sweep", "dataset": tiny, "selection": {"layers": "all", "contexts": {"from": 32, "to": 128, "factor": 2}},
             "kl_rows": 2, "output": os.path.join(tmp, "sweep"), "statistics": {"p_formats": ["int8/static:127"]},
             "sweep": {"base": "q=int8/token k=int8/token p=fp16",
                       "zip": {"p": ["int8/static:127", "e4m3/static:448"], "v": ["int8/channel", "e4m3/channel"]},
                       "vary": {"ksmooth": ["none", "global"]}}}
    json.dump(sweep, open(path, "w"))
    r = run(path, "--quiet")
    if r.returncode != 0 or "2 layers x 3 contexts x 4 recipes; 24 units to run" not in r.stdout or r.stderr.strip():
        fails.append(f"sweep run: {r.returncode} {r.stdout[:300]} {r.stderr[:300]}")
    else:
        header = open(os.path.join(sweep["output"], "results.csv")).readline().strip()
        if not header.endswith(',"p","v","ksmooth"'):
            fails.append(f"swept keys are not CSV columns: {header}")
        body = open(os.path.join(sweep["output"], "results.csv")).read()
        if ',"e4m3/static:448","e4m3/channel","global"' not in body:
            fails.append("a zip pair's values are missing from results.csv")
        for png in ("error_vs_context.png", "mass_flushed.png", "sqnr_per_recipe.png"):
            if not os.path.exists(os.path.join(sweep["output"], "figures", png)):
                fails.append(f"figure {png} not drawn")
        summary = open(os.path.join(sweep["output"], "summary.md")).read()
        for text in ("Mean SQNR dB by layer", "Mean SQNR dB by context", "| context 32 (dB) | context 64 (dB) | context 128 (dB) |",
                     "sweep.base's p=fp16 is replaced by each combination's p"):
            if text not in summary:
                fails.append(f"summary.md lacks {text!r}")
        if "q=int8/token k=int8/token p=e4m3/static:448 v=e4m3/channel ksmooth=global" not in json.load(open(os.path.join(sweep["output"], "config.json")))["recipes"]:
            fails.append("the zip x vary recipe names are not base + zip + vary")
    # Layers are numbers in every log where the dump's name is a plain decimal; a report written
    # before that (names as strings) still resumes without repeating a unit, and still checks.
    logs = {name: [json.loads(x) for x in open(os.path.join(sweep["output"], name))] for name in ("results.jsonl", "stats.jsonl")}
    if not all(type(x["layer"]) is int for rows_ in logs.values() for x in rows_) or {x["layer"] for x in logs["results.jsonl"]} != {0, 1}:
        fails.append(f"layers are not stored as integers: {sorted({repr(x['layer']) for x in logs['results.jsonl']})}")
    for name, rows_ in logs.items():
        with open(os.path.join(sweep["output"], name), "w") as f:
            f.writelines(json.dumps({**x, "layer": str(x["layer"])}) + "\n" for x in rows_)
    r = run(path, "--resume", "--quiet")
    if r.returncode != 0 or "0 units to run (24 already in the report)" not in r.stdout:
        fails.append(f"an old report with string layers does not resume: {r.returncode} {r.stdout[:300]} {r.stderr[:300]}")
    old_bounds = os.path.join(tmp, "old-bounds.json")
    json.dump({"report": sweep["output"], "bounds": [{"recipe": next(iter(json.load(open(os.path.join(sweep["output"], "config.json")))["recipes"])),
                                                      "layer": 1, "context": 64, "sqnr_db_min": -100}]}, open(old_bounds, "w"))
    r = subprocess.run([qattn, "check", old_bounds, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        fails.append(f"check on a report with string layers: {r.returncode} {r.stdout[-300:]} {r.stderr[-300:]}")
    # One token: a channel-mean-subtracted K is all zeros (0 / 0 in the outlier ratio); the run must
    # finish (it used to fail at its end on a null statistic, and --resume failed the same way).
    one = {"name": "one", "dataset": tiny, "selection": {"layers": [0], "contexts": [1]}, "kl_rows": 1,
           "recipes": {"fp16": "q=fp16 k=fp16 p=fp16 v=fp16"}, "output": os.path.join(tmp, "one")}
    json.dump(one, open(path, "w"))
    r = run(path, "--quiet")
    if r.returncode != 0 or "nan" in open(os.path.join(one["output"], "figures", "channel_outliers.csv")).read().lower():
        fails.append(f"a one-token context: {r.returncode} {r.stderr[-300:]}")
    for bad_sweep, message in (({"zip": {"p": ["fp16"], "v": ["fp16", "bf16"]}}, "sweep.zip.v: 2 values; the zip lists must have one length"),
                               ({"zip": {"p": ["fp16"]}, "vary": {"p": ["bf16"]}}, "sweep.vary.p: key 'p' is also in sweep.zip")):
        sweep["sweep"] = {"base": "q=fp16", **bad_sweep}
        sweep["output"] = os.path.join(tmp, "sweep-bad")
        json.dump(sweep, open(path, "w"))
        r = run(path)
        if r.returncode != 1 or message not in r.stderr:
            fails.append(f"bad sweep {bad_sweep}: {r.returncode} {r.stderr}")

print("\n".join(fails) if fails else "ok")
sys.exit(1 if fails else 0)
