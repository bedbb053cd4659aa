#!/usr/bin/env python3
"""`qattn check`: passes on the stored quickstart bounds; a deliberately worse recipe under the same
name fails, naming the recipe, layer, context, metric and by how much. Run from the repository root.
Usage: test_check.py QATTN"""
import json
import os
import subprocess
import sys
import tempfile

qattn = sys.argv[1]
fails = []
ok = subprocess.run([qattn, "check", "experiments/bounds/quickstart.json"], capture_output=True, text=True)
if ok.returncode != 0 or "0 violation(s)" not in ok.stdout:
    fails.append(f"stored bounds do not pass: {ok.returncode} {ok.stdout[-500:]} {ok.stderr}")
# The verdict is what check prints: the plan and the verdict, no per-unit lines, summary or figures.
if len((ok.stdout + ok.stderr).splitlines()) > 3:
    fails.append(f"check printed {len((ok.stdout + ok.stderr).splitlines())} lines before its verdict; expected the plan and the verdict")

with tempfile.TemporaryDirectory() as tmp:
    exp = json.load(open("experiments/quickstart.json"))
    # The same name, a worse recipe: e4m3 P at a static scale of 8 instead of 448 (P's small
    # values fall below e4m3's range and flush).
    exp["recipes"]["+ e4m3 P 448"] = "q=int8/token k=int8/token ksmooth=global acc.qk=exact p=e4m3/static:8"
    exp["output"] = os.path.join(tmp, "report")
    exp_path = os.path.join(tmp, "worse.json")
    json.dump(exp, open(exp_path, "w"))
    bounds = json.load(open("experiments/bounds/quickstart.json"))
    bounds["experiment"] = exp_path
    bounds_path = os.path.join(tmp, "bounds.json")
    json.dump(bounds, open(bounds_path, "w"))
    bad = subprocess.run([qattn, "check", bounds_path], capture_output=True, text=True)
    if bad.returncode == 0:
        fails.append("a worse recipe passed the check")
    if "FAIL recipe '+ e4m3 P 448' layer 15 context 2048: mean SQNR" not in bad.stderr or "worse by" not in bad.stderr:
        fails.append(f"the failure does not name recipe, layer, context and size on stderr: {bad.stderr[-800:]}")
    for line in bad.stderr.splitlines():
        if line.startswith("FAIL") and "'+ e4m3 P 448'" not in line:
            fails.append(f"an unchanged recipe failed: {line}")

    # Malformed bounds: one error naming the file and the entry's key, before any recomputation.
    def bounds_error(edit, message):
        bb = json.load(open("experiments/bounds/quickstart.json"))
        edit(bb)
        json.dump(bb, open(bounds_path, "w"))
        r = subprocess.run([qattn, "check", bounds_path], capture_output=True, text=True)
        if r.returncode != 1 or message not in r.stderr or "units to run" in r.stdout:
            fails.append(f"bounds error {message!r}: {r.returncode} {r.stdout[-200:]} {r.stderr}")

    bounds_error(lambda bb: bb["bounds"][0].update(sqnr_db_mn=bb["bounds"][0].pop("sqnr_db_min")),
                 "bounds.json: bounds[0].sqnr_db_mn: unknown key; expected recipe, layer, context, sqnr_db_min")
    bounds_error(lambda bb: bb.update(bounds=[]), "bounds.json: bounds: the list is empty")
    bounds_error(lambda bb: bb.update(experiment=tmp), ": is a folder; expected the experiment file (a JSON file)")
    bounds_error(lambda bb: bb["bounds"][1].update(context=2 ** 40), "bounds.json: bounds[1]: expected recipe (string), layer (name or index) and context")
    bounds_error(lambda bb: bb["bounds"][2].update(kl_max="small"), "bounds.json: bounds[2].kl_max: expected a number")

print("\n".join(fails) if fails else "ok")
sys.exit(1 if fails else 0)
