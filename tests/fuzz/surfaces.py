"""fuzz.py's targets for the surfaces beyond the CLI's input files:

  py     the Python API: one qattn call with mutated arguments (arrays of any shape, dtype, fill and
         strides, stride-0 views larger than memory, scalars of every type and range, thread counts,
         row selections, recipe and spec strings, writers' layers and attributes), run by
         py_driver.py in the project's Python; a NaN handed back is `nan`, a file a writer wrote and
         its reader refuses is `lost`.
  names  reports written under hostile names (experiment and recipe names, kernel names, output
         folders with quotes, $(...), backquotes, ;, |, commas, line breaks, a leading =): a command
         a shell ran is a `crash`, a CSV row or Markdown table a name broke is `lost`.
  race   report folders shared by two commands (run, run --resume, run --force, score --force) over
         a report whose logs were cut at a random byte, or with the first command killed at a random
         moment: a user's file removed, or a finished report whose rows differ from an uninterrupted
         run's, is `lost`.
  fit    qattn.fit on a dump of an odd shape (head dims 1, 3, 80, 96, 257; GQA; a few tokens) with
         mutated arguments, outputs files of one or two kernels (or one given twice), an attention
         function, and a resumed folder whose candidates.jsonl is cut, edited (a NaN, a wrong type) or
         made by a fit of other units: a search that stops on its own moves is `unclear` (its error
         names no argument), a NaN in the result `nan`, a resume that keeps an earlier fit's
         evaluations of other units `lost`.
"""
import csv
import json
import os
import re
import signal
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ("py", "names", "race", "fit")

HOSTILE = ["x';touch PWNED;'", 'x";touch PWNED;"', "x$(touch PWNED)", "x`touch PWNED`", "x\ntouch PWNED", "a,b", 'a"b',
           "a|b", "=1+1", "+cmd", "@x", "-x", "tick`s", "a\rb", "é ü", "a\tb", "| `x` |"]
INTS = [0, 1, -1, 2, 7, 2**31 - 1, 2**31, 2**32 + 1, 2**63 - 1, 10**6]
FLOATS = [0.0, -1.0, 0.125, 1e30, 1e308, {"float": "nan"}, {"float": "inf"}, 5e-324]
ODD = [None, "yes", "", [], [1.5], ["a"], True, 1.5, {"tuple": [1.5, 3]}, "\x00"]
ROWS = [None, "all", "range:0:8", "range:5:3", "sample:4:1", "sample:0:1", "range:0:4294967297", {"tuple": [0, 8]},
        {"tuple": [1.5, 3]}, {"tuple": [0, 2**40]}, [3, 1, 2], [0, 1, 2], [-1], [2**31], "sample:2147483648:1"]
DTYPES = ["float32", "float32", "float16", "bfloat16", "float64", "int32", "bool", "complex64", "object", "<U3"]
FORMATS = ["e4m3", "int8", "fp16", "bf16", "e2m1", "e8m0", "int4", "nope", ""]
SPECS = ["int8/token", "int8/channel", "int4/group:32/scale:fp16", "e4m3/static:448", "int8/static:0", "int8/static:-1",
         "e4m3/tensor", "int8", "int8/group:0", "int8/group:4097", "x/y"]


def pick(rng, good, odd_share=0.25):
    return rng.choice(ODD) if rng.random() < odd_share else rng.choice(good)


def _array(rng, shape, fill="normal", no_mid_views=False):
    """An array spec: mostly the shape asked, sometimes another rank, a zero, a huge dimension (as
    a stride-0 view: no memory), an unsupported dtype or byte order, non-finite values. With
    no_mid_views, the views are past any machine's memory, never of a few or a dozen GB (without an
    address-space limit, under the sanitizers, the lab would take them and work for minutes)."""
    shape = list(shape)
    spec = {"shape": shape, "dtype": "float32", "fill": fill, "seed": rng.randrange(1 << 30)}
    r = rng.random()
    if r < 0.15:
        i = rng.randrange(len(shape))
        shape[i] = rng.choice([0, 2**32 + 1] + ([] if no_mid_views else [2**31, 2**20]))
        spec["stride0"] = True
    elif r < 0.22:
        spec["shape"] = shape[: rng.randrange(len(shape))] + ([2] * rng.randrange(0, 3))
    elif r < 0.3:
        spec["shape"] = [rng.choice([2**20, 2**16]) for _ in shape]
        spec["stride0"] = True
    if rng.random() < 0.15:
        spec["dtype"] = rng.choice(DTYPES)
    if rng.random() < 0.05:
        spec["byteorder"] = ">"
    if rng.random() < 0.1:
        spec["fill"] = rng.choice(["nan", "inf", "huge", "zero"])
    return {"array": spec}


def mutate_kwargs(rng, kw, pools):
    """Replace a few keyword values by values from their pools, or by a value of another type."""
    for k in rng.sample(sorted(pools), min(len(pools), rng.choice([0, 1, 1, 2, 3]))):
        kw[k] = pick(rng, pools[k])
    return kw


def gen_py(rng, c, corpus, recipes):
    small = getattr(corpus, "py_no_mid_views", False)

    def array(r, shape, fill="normal"):  # noqa: F811 - the module's, with the corpus's option
        return _array(r, shape, fill, small)

    hq, n, d = rng.choice([(2, 16, 8), (4, 33, 16), (1, 64, 32)])
    hkv = rng.choice([1, hq, 3])
    qkv = [array(rng, (hq, n, d)), array(rng, (hkv, n, d)), array(rng, (hkv, n, d))]
    attention_pools = {"causal": [True, False], "window": INTS, "softmax_scale": FLOATS, "rows": ROWS,
                       "prob_rows": [[], [0, 1], [-1], [2**31], [5, 5]]}
    recipe = rng.choice(recipes) if rng.random() < 0.8 else rng.choice(["", "q=int8/token", "q=int9", "p=int8/static:0", "x" * 5000])
    fn = rng.choice(["reference", "emulate", "emulate", "quantize", "round_to", "encode", "compare", "row_divergence",
                     "mass_per_decade", "mass_flushed", "channel_outliers", "p_flush_threshold", "sample_rows", "load_layer",
                     "write_dump", "write_outputs", "score", "Recipe"])
    call = {"fn": fn, "args": [], "kwargs": {}}
    if fn == "reference":
        call["args"] = qkv
        call["kwargs"] = mutate_kwargs(rng, {}, attention_pools)
    elif fn == "emulate":
        call["args"] = qkv + [recipe]
        call["kwargs"] = mutate_kwargs(rng, {}, dict(attention_pools, threads=[0, 1, 2, -1, 10**6, 2**31 - 1]))
    elif fn == "quantize":
        call["args"] = [qkv[0], pick(rng, SPECS, 0.1)]
    elif fn in ("round_to", "encode"):
        call["args"] = [array(rng, rng.choice([(5,), (2, 3), (1, 2, 3)])), pick(rng, FORMATS, 0.1)]
    elif fn == "compare":
        a = array(rng, (3, 5))
        call["args"] = [a, a if rng.random() < 0.5 else array(rng, (3, 5))]
    elif fn == "row_divergence":
        call["args"] = [array(rng, (17,), "probs"), array(rng, (17,), "probs")]
        call["kwargs"] = mutate_kwargs(rng, {}, {"floor": FLOATS})
    elif fn == "mass_per_decade":
        call["args"] = [array(rng, (17,), "probs")]
    elif fn == "mass_flushed":
        call["args"] = [array(rng, (17,), "probs"), pick(rng, FLOATS)]
    elif fn == "channel_outliers":
        call["args"] = [qkv[1], pick(rng, INTS, 0.1)]
        call["kwargs"] = mutate_kwargs(rng, {}, {"tokens": INTS, "subtract_mean": [True, False]})
    elif fn == "p_flush_threshold":
        call["args"] = [pick(rng, SPECS + ["int8/static:127", "e4m3/static:1e-300", "e4m3/static:1e300"], 0.1)]
    elif fn == "sample_rows":
        call["args"] = [pick(rng, INTS, 0.1), pick(rng, INTS, 0.1), pick(rng, [0, 1, 2**64 - 1, 2**64, -1], 0.1)]
    elif fn == "load_layer":
        call["args"] = ["tiny-a.h5", pick(rng, ["0", "1", 0, 1, 2, -1, "x", "/layers/0"], 0.2)]
        call["kwargs"] = mutate_kwargs(rng, {}, {"heads": [[0], [0, 1], [-1], [2**31], []], "tokens": INTS})
    elif fn == "write_dump":
        layer = {"name": pick(rng, ["0", "1", "a"] + HOSTILE + ["/abs", ".", "a\x00b"], 0.1), "q": qkv[0], "k": qkv[1], "v": qkv[2]}
        layer = mutate_kwargs(rng, layer, {"causal": [True, False], "sliding_window": INTS, "softmax_scale": FLOATS,
                                           "rope": ["applied", "none", "a\x00b"]})
        attrs = {"schema": "qattn-dump/1", "model": "m", "weights": "w", "text_source": "t", "n_tokens": n,
                 "created_by": "fuzz", "created_at": "now"}
        attrs = mutate_kwargs(rng, attrs, {"schema": ["qattn-dump/1", "nope", "qattn-outputs/1"], "n_tokens": INTS,
                                           "model": ["m"] + HOSTILE + ["a\x00b"]})
        call.update(args=["written.h5", [layer], attrs], kwargs={"dtype": rng.choice(["fp32", "fp16", "bf16", "e4m3"])},
                    check="dump")
    elif fn == "write_outputs":
        entry = {"layer": pick(rng, ["0", 0, "1"] + HOSTILE, 0.1), "o": array(rng, (hq, n, d))}
        entry = mutate_kwargs(rng, entry, {"rows": ROWS, "context": INTS + [n]})
        call.update(args=["written.h5", pick(rng, ["k"] + HOSTILE + ["", "a\x00b"], 0.1), [entry]],
                    kwargs={"recipe": rng.choice(["", recipe]), "dtype": rng.choice(["fp32", "fp16", "bf16"])}, check="outputs")
    elif fn == "score":
        kw = {"layers": rng.choice([None, ["0"], [0, 1], [], ["9"]]), "contexts": rng.choice([None, [16], [8, 16], [], [0], [10**6]]),
              "recipe": rng.choice([None, recipe]), "output": rng.choice(["rep"] + ["rep-" + h for h in HOSTILE]),
              "kernel": rng.choice([None, "k"] + HOSTILE), "rows": rng.choice([None, 4, 0, -1, 10**6])}
        kw = {k: v for k, v in kw.items() if v is not None or k == "output"}
        call.update(args=[{"kernel": rng.choice(["honest", "honest", "wrong_shape", "nan"])}, "tiny-a.h5"], kwargs=kw, check="report")
    else:  # Recipe
        call["args"] = [recipe]
    c["exe_kind"] = "python"
    c["argv"] = [os.path.join(HERE, "py_driver.py"), "call.json"]
    c["files"]["call.json"] = json.dumps(call)
    c["mutations"].append("py " + json.dumps(call)[:300])
    names = ["q", "k", "v", "x", "t", "ref", "p", "p_ref", "rows", "prob_rows", "threads", "softmax_scale", "window", "causal",
             "recipe", "spec", "format", "layers", "contexts", "layer", "context", "kernel", "o", "name", "heads", "tokens",
             "floor", "threshold", "head", "count", "seed", "dtype", "attrs", "output", "sliding_window", "rope", "schema",
             "n_tokens", "model", "line", "existing", "subtract_mean"]
    c["fields"] |= set(names)
    c["tokens"] = [f"{x}:" for x in names] + [f"{x}[" for x in names] + [f"{x} " for x in ("q", "k", "v", "x", "t", "p")] + [f"{fn}:"]
    c["names"] |= {"tiny-a.h5", "written.h5", "rep"}
    return c


FIT_STARTS = ["q=int8/token k=int8/token", "q=int8/token k=int8/token p=fp16 v=fp16", "q=e4m3/head k=e4m3/head p=e4m3/static:448",
              "q=fp16 k=fp16 v=fp16 p=fp16", "q=int8/group:32 k=int8/group:32", "q=int8/token k=int8/token p=e4m3/static:448 v=e4m3/channel",
              "preset=qflash-46adca5", "q=int9", "", "q=int8/token k=int8/token tiles=16x16"]
FIT_KERNELS = ["q=int8/token k=int8/token", "q=fp16 k=fp16 v=fp16 p=fp16 out=fp16", "q=int8/block:16 k=int8/block:16 p=e4m3/static:448",
               "q=int8/token k=int8/token ksmooth=global"]


def gen_fit(rng, c, corpus):
    """qattn.fit (py_driver.py's 'fit' setup) on a dump of an odd shape, with mutated arguments and
    a prefilled, damaged or foreign report folder."""
    hq, hkv = rng.choice([(1, 1), (2, 1), (4, 2), (3, 1)])
    setup = {"heads": hq, "kv_heads": hkv, "tokens": rng.choice([1, 5, 16, 33]), "dim": rng.choice([1, 3, 8, 80, 96, 257]),
             "seed": rng.randrange(1 << 30), "kernel_recipe": rng.choice(FIT_KERNELS),
             "files": rng.choice(["one", "one", "one", "two_kernels", "twice", "function"]),
             "prefill": rng.choice([None, None, "cut", "nan", "wrong_type", "junk", "other_rows", "other_dump"])}
    clean = rng.random() < 0.5  # half the trials a valid call: the search itself on the odd shape
    if clean:
        setup.update(files=rng.choice(["one", "function"]), prefill=rng.choice([None, None, "cut"]))
    kw = {"output": "fit-out", "start": rng.choice(FIT_STARTS[:6]) if clean else rng.choice(FIT_STARTS), "rows": 0,
          "budget": rng.choice([0.5, 1.0, 2.0]), "beam": 1}
    if not clean:
        kw = mutate_kwargs(rng, kw, {"rows": [0, 1, 4, -1, 2**31, 10**6], "seed": [0, 1, 2**63, 2**64 - 1, 2**64, -1],
                                     "budget": [0.5, 1.0, 0.0, -1.0, {"float": "nan"}, {"float": "inf"}], "beam": [1, 2, 0, 65, -1],
                                     "top": [1, 10, 0, -3], "min_gain": [0.05, 0.0, -1.0, {"float": "nan"}],
                                     "force": [True, False], "resume": [True, False], "name": ["k", "", "a/b"] + HOSTILE[:4]})
    if setup["prefill"]:
        kw["resume"] = True
    if setup["files"] == "function" and rng.random() < (0.5 if clean else 0.3):
        kw["name"] = rng.choice(["k", "mine"])
    if not clean and setup["files"] == "function" and rng.random() < 0.3:
        kw.update(rng.choice([{"dtype": "float16"}, {"dtype": "int8"}, {"layout": "BHND"}, {"tensor": "jax"}, {"contexts": [1]},
                              {"layers": ["9"]}, {"kernel": "k"}]))
    call = {"fn": "fit", "setup": setup, "kwargs": kw, "check": "fit"}
    c["exe_kind"] = "python"
    c["argv"] = [os.path.join(HERE, "py_driver.py"), "call.json"]
    c["files"]["call.json"] = json.dumps(call)
    c["mutations"].append("fit " + json.dumps(call)[:300])
    names = ["rows", "seed", "budget", "beam", "top", "min_gain", "start", "kernel", "name", "output", "dump", "force", "resume",
             "dtype", "layout", "tensor", "contexts", "layers", "line", "kernel_vs_recipe_db", "recipe_vs_float64_db", "failed", "invalid",
             "recipe", "q", "k", "v", "p"]
    c["fields"] |= set(names)
    c["tokens"] = [f"{x}=" for x in names] + [f"{x}:" for x in names] + ["--from", "--resume", "--force", "fit --", "candidates.jsonl",
                                                                         "config.json", "qattn-outputs", "fit:"]
    c["names"] |= {"fit-dump.h5", "fit-out", "k1.h5", "k2.h5", "fit-out/candidates.jsonl"}
    return c


def gen_names(rng, c, corpus, jload, jdump):
    """qattn run on the basic experiment with hostile experiment and recipe names."""
    tree = jload(corpus.exps[corpus.exp_names[0]])
    name = rng.choice(HOSTILE)
    recipes = {rng.choice(HOSTILE): "q=int8/token k=int8/token", rng.choice(HOSTILE) + "2": "q=fp16 k=fp16"}
    doc = json.loads(jdump(tree))
    doc.update(name=name, recipes=recipes, output="out-" + rng.choice(["plain", "q'uote", "d$(ollar)", "s;emi"]))
    doc.pop("sweep", None)
    c["files"]["exp.json"] = json.dumps(doc)
    c["argv"] = ["run", "exp.json", "--quiet"]
    c["report"] = doc["output"]
    c["mutations"].append(f"names: name {name!r}, recipes {list(recipes)}, output {doc['output']!r}")
    c["names"] |= {"exp.json", doc["output"]}
    return c


def gen_race(rng, c, corpus):
    """Two commands on one report folder that holds a complete report of the basic experiment, cut
    at a random byte of a log (or killed mid-run), and a user's notes.txt."""
    seed = corpus.exp_names[0]
    base = corpus.base_reports.get(seed)
    if not base:
        c["unsafe"] = True
        return c
    out = json.loads(corpus.exps[seed])["output"]
    files = {os.path.join(out, k): v for k, v in base.items()}
    log = rng.choice(["results.jsonl", "stats.jsonl"])
    full = base[log]
    at = rng.randrange(len(full) + 1)
    files[os.path.join(out, log)] = full[:at]
    files.pop(os.path.join(out, "summary.md"), None)  # written again when a run completes
    files[os.path.join(out, "notes.txt")] = b"the user's notes"
    c["prefill"] = files
    flags = [["--resume"], ["--resume"], ["--force"], []]
    c["race"] = {"first": rng.choice(flags[:3]), "second": rng.choice(flags), "delay": rng.random() * 1.5,
                 "kill_first": rng.random() < 0.3, "report": out, "want": {k: sorted(base[k].decode().splitlines())
                                                                           for k in ("results.jsonl", "stats.jsonl") if k in base}}
    c["argv"] = ["run", seed, "--quiet"]
    c["mutations"].append(f"race: {log} cut at byte {at} of {len(full)}; {c['race']['first']} then {c['race']['second']} "
                          f"after {c['race']['delay']:.2f} s{' (first killed)' if c['race']['kill_first'] else ''}")
    c["names"] |= {seed, out}
    return c


def run_race(runner, c, cwd):
    r = c["race"]
    env = runner.env(cwd)
    argv = [runner.exe] + c["argv"]
    t0 = time.monotonic()
    a = subprocess.Popen(argv + r["first"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=runner.limits)
    time.sleep(r["delay"])
    if r["kill_first"]:
        try:
            os.killpg(a.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    b = subprocess.Popen(argv + r["second"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=runner.limits)
    outs, hang = [], False
    for p in (a, b):
        try:
            o, e = p.communicate(timeout=runner.timeout * 3)
        except subprocess.TimeoutExpired:
            hang = True
            os.killpg(p.pid, signal.SIGKILL)
            o, e = p.communicate()
        outs.append((p.returncode, o.decode("utf-8", "replace"), e.decode("utf-8", "replace")))
    killed = -signal.SIGKILL if r["kill_first"] else None
    crashed = [code for code, _, _ in outs if code not in (0, 1, killed)]
    res = {"rc": crashed[0] if crashed else outs[1][0], "stdout": outs[0][1] + outs[1][1], "stderr": outs[0][2] + outs[1][2],
           "hang": hang, "elapsed": time.monotonic() - t0}
    rep = os.path.join(cwd, r["report"])
    lost = []
    if not os.path.exists(os.path.join(rep, "notes.txt")):
        lost.append("the user's notes.txt was removed")
    for code, _, err in outs:
        if code == 1 and "another qattn command is writing" not in err and "the report folder exists" not in err:
            lost.append(f"refused with an unexpected error: {err.strip().splitlines()[-1] if err.strip() else '(none)'}")
    finished = [o for o in outs[(1 if r["kill_first"] else 0):] if o[0] == 0]
    if finished and not os.path.exists(os.path.join(rep, "summary.md")):
        lost.append("a command exited 0 but the report has no summary.md")
    elif finished:
        for log, want in r["want"].items():
            path = os.path.join(rep, log)
            have = open(path, "rb").read().decode().splitlines() if os.path.exists(path) else []
            if sorted(_without_unit_rows(have)) != sorted(_without_unit_rows(want)):
                lost.append(f"{log}: {len(have)} rows after a finished run, {len(want)} in an uninterrupted one")
    if lost:
        res["lost"] = "; ".join(lost)
    return res


def _without_unit_rows(lines):
    return [json.dumps({k: v for k, v in json.loads(x).items() if k != "unit_rows"}, sort_keys=True) for x in lines if x.strip()]


def table_widths(md):
    return {len(re.findall(r"(?<!\\)\|", line)) for line in md.splitlines() if line.startswith("|")}


def report_findings(folder):
    """A report whose CSV rows or Markdown tables a name broke."""
    out = []
    for dp, _, fs in os.walk(folder):
        for fn in fs:
            p = os.path.join(dp, fn)
            if fn.endswith(".csv"):
                with open(p, newline="", encoding="utf-8", errors="replace") as f:
                    widths = {len(r) for r in csv.reader(f)}
                if len(widths) > 1:
                    out.append(f"{fn}: rows of {sorted(widths)} fields")
            elif fn == "summary.md":
                for table in open(p, encoding="utf-8", errors="replace").read().split("\n\n"):
                    if table.startswith("|") and len(table_widths(table)) > 1:
                        out.append(f"summary.md: a table with rows of {sorted(table_widths(table))} cells")
    return out


def check(c, res, cwd):
    """A class for what only these targets can find, or None: ('crash' | 'nan' | 'lost', message)."""
    if c["target"] == "race":
        return ("lost", res["lost"]) if res.get("lost") else None
    if any(f.startswith("PWNED") for f in os.listdir(cwd)):
        return "crash", "a shell ran a command from a name (a PWNED file was created)"
    if c["target"] == "fit" and res["rc"] == 0:
        for line in res["stdout"].splitlines():
            if line.startswith("NAN-RESULT"):
                return "nan", line
            if line.startswith("STALE"):
                return "lost", line
    if c["target"] == "py" and res["rc"] == 0:
        for line in res["stdout"].splitlines():
            if line.startswith("NAN-RESULT"):
                return "nan", line
            if line.startswith("WRITER-READER") or line.startswith("CORRUPT"):
                return "lost", line
    if c["target"] == "names" and res["rc"] == 0:
        rep = os.path.join(cwd, c["report"])
        found = report_findings(rep) if os.path.isdir(rep) else []
        if found:
            return "lost", "report corrupted by a name: " + "; ".join(found[:3])
    return None
