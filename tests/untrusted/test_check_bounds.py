"""`qattn check --update` stores bounds only from a complete report, and keeps a bit-exact kernel's
kernel-vs-recipe bound (infinite: the kernel must stay bit-equal) instead of leaving it out."""
import json
import os
import subprocess

import numpy as np

import qattn

RECIPE = "q=int8/token k=int8/token"


def emulated(q, k, v, **kw):
    return qattn.emulate(q, k, v, RECIPE, causal=kw["causal"], window=kw["window"], softmax_scale=kw["softmax_scale"])["out"]


def bounds_of(qattn_exe, tmp_path, report, name="b.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"report": report, "note": "", "bounds": []}))
    return path, subprocess.run([qattn_exe, "check", str(path), "--update"], capture_output=True, text=True)


def test_update_refuses_an_incomplete_report(dump, qattn_exe, tmp_path):
    rep = str(tmp_path / "rep")
    qattn.score(emulated, dump, layers=[0, 15], contexts=[64], recipe=RECIPE, output=rep)
    os.remove(os.path.join(rep, "summary.md"))  # as a score stopped before its last file
    lines = open(os.path.join(rep, "results.jsonl")).read().splitlines()
    open(os.path.join(rep, "results.jsonl"), "w").write("\n".join(lines[:9]) + "\n")
    path, r = bounds_of(qattn_exe, tmp_path, rep)
    assert r.returncode == 1 and "is incomplete (no summary.md" in r.stderr, r.stderr
    assert json.loads(path.read_text())["bounds"] == []  # nothing stored


def test_bit_exact_kernel_keeps_an_infinite_bound(dump, qattn_exe, tmp_path):
    rep = str(tmp_path / "rep")
    rows = qattn.score(emulated, dump, layers=[0], contexts=[64], recipe=RECIPE, output=rep)
    assert all(r["kernel_vs_recipe_sqnr_db"] == "inf" for r in rows)
    path, r = bounds_of(qattn_exe, tmp_path, rep)
    assert r.returncode == 0, r.stderr
    (b,) = json.loads(path.read_text())["bounds"]
    assert b["kernel_vs_recipe_db_min"] == "inf", b
    r = subprocess.run([qattn_exe, "check", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

    # One bit off on one output: no longer bit-equal, and the gate says so.
    def off_by_one_bit(q, k, v, **kw):
        o = emulated(q, k, v, **kw)
        o.view(np.uint32)[0, 5, 3] ^= 1
        return o

    qattn.score(off_by_one_bit, dump, layers=[0], contexts=[64], recipe=RECIPE, output=rep, force=True, kernel="emulated")
    r = subprocess.run([qattn_exe, "check", str(path)], capture_output=True, text=True)
    assert r.returncode != 0 and "no longer bit-equal to its recipe (1 of 9 heads differ" in r.stderr, r.stderr
