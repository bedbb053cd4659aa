"""qattn.score interrupted: the kernel's outputs (the costly part) are kept in the report's
outputs/ as each context finishes, nothing is stranded in a temporary folder, resume=True calls the
kernel only for what is missing and ends with the rows of an uninterrupted call, and Ctrl-C stops
scoring between units instead of after the last one."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import qattn

# The interrupted call and its resumption run this same code (a resumed call reuses only outputs
# that the same function made), the second with resume and no pause; it prints the contexts it computed.
CHILD = textwrap.dedent("""
    import json, sys, time, qattn
    dump, out, pause, resume = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:] == ["resume"]
    calls = []
    def kernel(q, k, v, **kw):
        calls.append(q.shape[1])
        if len(calls) > 1:
            time.sleep(pause)  # the first context is written, then the process is stopped
        return qattn.reference(q, k, v, causal=kw["causal"], window=kw["window"], softmax_scale=kw["softmax_scale"])["out"]
    qattn.score(kernel, dump, layers=%s, contexts=%s, recipe="q=int8/token k=int8/token", output=out, resume=resume)
    print(json.dumps(calls))
""")


def kernel(q, k, v, **kw):
    kernel.calls.append(q.shape[1])
    return qattn.reference(q, k, v, causal=kw["causal"], window=kw["window"], softmax_scale=kw["softmax_scale"])["out"]


def wait_for(predicate, seconds=120):
    end = time.time() + seconds
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def metrics(rows):
    return sorted((r["layer"], r["context"], r["head"], r["sqnr_db"], r["kernel_vs_recipe_sqnr_db"]) for r in rows)


def test_sigterm_keeps_outputs_and_resume_completes(dump, tmp_path):
    out = str(tmp_path / "rep")
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    os.makedirs(env["TMPDIR"])
    p = subprocess.Popen([sys.executable, "-c", CHILD % ("[0]", "[64, 128, 192]"), dump, out, "600"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = os.path.join(out, "outputs", "kernel-ctx64.h5")
    assert wait_for(lambda: os.path.exists(first)), p.communicate(timeout=5)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert os.listdir(env["TMPDIR"]) == [], "outputs stranded in the temporary folder"
    assert sorted(os.listdir(os.path.join(out, "outputs"))) == ["kernel-ctx64.h5"]

    r = subprocess.run([sys.executable, "-c", CHILD % ("[0]", "[64, 128, 192]"), dump, out, "0", "resume"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == [128, 192], r.stdout  # the kept context is not computed again
    rows = [json.loads(line) for line in open(os.path.join(out, "results.jsonl"))]
    kernel.calls = []
    whole = qattn.score(kernel, dump, layers=[0], contexts=[64, 128, 192], recipe="q=int8/token k=int8/token", output=str(tmp_path / "whole"))
    assert metrics(rows) == metrics(whole) and len(rows) == 3 * 9
    config = json.load(open(os.path.join(out, "config.json")))
    assert all(os.path.exists(f["file"]) for f in config["outputs"]), config["outputs"]  # recorded where they are kept


def test_ctrl_c_stops_scoring_between_units(dump, tmp_path):
    out = str(tmp_path / "rep")
    layers = [l["name"] for l in qattn.open_dump(dump)["layers"]]
    p = subprocess.Popen([sys.executable, "-c", CHILD % (repr(layers), "[1024, 2048]"), dump, out, "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = os.path.join(out, "results.jsonl")
    assert wait_for(lambda: os.path.exists(results) and os.path.getsize(results) > 0, 600), p.communicate(timeout=5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    units = len(open(results).read().splitlines()) // 9
    assert units < 2 * len(layers), "scoring ran to the end after Ctrl-C"
    assert sorted(os.listdir(os.path.join(out, "outputs"))) == ["kernel-ctx1024.h5", "kernel-ctx2048.h5"]  # kept
