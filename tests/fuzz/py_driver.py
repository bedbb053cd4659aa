#!/usr/bin/env python3
"""One fuzz trial of the Python API (tests/fuzz/surfaces.py writes CALL.json):

  py_driver.py CALL.json

CALL.json: {"fn": NAME, "args": [...], "kwargs": {...}, "check": ...}. A value {"array": SPEC} becomes a
NumPy array (SPEC: shape, dtype, fill, stride0 = a view of one element of memory whatever its shape,
byteorder); {"tuple": [...]} a tuple; {"kernel": KIND} a Python attention function for qattn.score.
Prints on stdout one line per finding: 'NAN-RESULT <where>' for a NaN (or an Inf outside a *_db
value) handed back, 'WRITER-READER <msg>' for a file a writer wrote and its reader refused,
'CORRUPT <msg>' for a report whose CSV or Markdown a name broke. An exception is one
'qattn: error: <type>: <message>' line on stderr and exit status 1.
"""
import json
import math
import os
import sys

import numpy as np

import qattn
from surfaces import report_findings  # the same check as the names target's


def build_array(spec):
    dtype = spec.get("dtype", "float32")
    if dtype == "bfloat16":
        import ml_dtypes

        dt = np.dtype(ml_dtypes.bfloat16)
    else:
        dt = np.dtype(dtype)
    if spec.get("byteorder") == ">" and dt.kind in "fiuc":
        dt = dt.newbyteorder(">")
    shape = tuple(spec["shape"])
    fill = spec.get("fill", "normal")
    rng = np.random.default_rng(spec.get("seed", 0))
    if spec.get("stride0"):
        one = np.zeros(1, dtype=dt)
        one[0] = {"nan": np.nan, "inf": np.inf, "huge": 3e38, "zero": 0}.get(fill, 1) if dt.kind in "fc" else 1
        return np.lib.stride_tricks.as_strided(one, shape=shape, strides=(0,) * len(shape))
    n = int(np.prod(shape)) if shape else 1
    if n > 1 << 22:  # only views may be that large: a real array of it is the fuzzer's own OOM
        raise SystemExit(0)
    base = rng.standard_normal(n)
    if fill == "nan":
        base[rng.integers(0, n)] = np.nan
    elif fill == "inf":
        base[rng.integers(0, n)] = np.inf
    elif fill == "huge":
        base *= 1e30
    elif fill == "zero":
        base[:] = 0
    elif fill == "probs":
        base = np.abs(base)
        base /= base.sum() or 1
    if dt.kind == "O":
        return np.array(list(base), dtype=object).reshape(shape)
    if dt.kind == "U":
        return base.astype(str).reshape(shape)
    return base.astype(dt).reshape(shape)


def kernel_of(kind):
    def honest(q, k, v, **kw):
        return qattn.reference(q, k, v, causal=kw["causal"], window=kw["window"], softmax_scale=kw["softmax_scale"])["out"]

    def wrong_shape(q, k, v, **kw):
        return np.zeros((1, 1), np.float32)

    def nan(q, k, v, **kw):
        o = honest(q, k, v, **kw)
        o[0, 0, 0] = np.nan
        return o

    return {"honest": honest, "wrong_shape": wrong_shape, "nan": nan}[kind]


def build(v):
    if isinstance(v, dict) and "array" in v:
        return build_array(v["array"])
    if isinstance(v, dict) and "tuple" in v:
        return tuple(build(x) for x in v["tuple"])
    if isinstance(v, dict) and "kernel" in v:
        return kernel_of(v["kernel"])
    if isinstance(v, dict) and "float" in v:
        return float(v["float"])  # "nan", "inf", "-inf"
    if isinstance(v, dict):
        return {k: build(x) for k, x in v.items()}
    if isinstance(v, list):
        return [build(x) for x in v]
    return v


def nonfinite(v, where, key=""):
    """NaN anywhere, Inf outside a *_db value (an exact match's SQNR is documented as inf)."""
    out = []
    if isinstance(v, dict):
        for k, x in v.items():
            out += nonfinite(x, f"{where}[{k!r}]", str(k))
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            out += nonfinite(x, f"{where}[{i}]", key)
    elif isinstance(v, np.ndarray) and v.dtype.kind == "f":
        if np.isnan(v).any() or (np.isinf(v).any() and not key.endswith("_db")):
            out.append(f"{where}: array holds NaN or Inf")
    elif isinstance(v, float):
        if math.isnan(v) or (math.isinf(v) and not key.endswith("_db")):
            out.append(f"{where} = {v}")
    elif isinstance(v, str) and key.endswith("_db") and v in ("nan", "-nan", "-inf"):
        out.append(f"{where} = {v!r}")
    return out


def fit_dump(setup, seed):
    rng = np.random.default_rng(seed)
    hq, hkv, n, d = setup["heads"], setup["kv_heads"], setup["tokens"], setup["dim"]
    layer = {"name": "0", "q": rng.standard_normal((hq, n, d)).astype(np.float32), "k": rng.standard_normal((hkv, n, d)).astype(np.float32),
             "v": rng.standard_normal((hkv, n, d)).astype(np.float32), "causal": True}
    qattn.write_dump("fit-dump.h5", [layer], {"schema": "qattn-dump/1", "model": "fuzz", "weights": "random", "text_source": "none",
                                              "n_tokens": n, "created_by": "py_driver", "created_at": "now"}, dtype="fp32")


def fit_setup(setup, kwargs):
    """The dump, the kernel (outputs files or a function) and a prefilled report folder of a fit trial.
    Returns the kernel argument of qattn.fit, and whether an earlier fit prefilled the folder."""
    fit_dump(setup, setup["seed"])
    d = qattn.load_layer("fit-dump.h5", "0")
    kw = dict(causal=d["causal"], softmax_scale=d["softmax_scale"])

    def outputs(path, name):
        o = qattn.emulate(d["q"], d["k"], d["v"], setup["kernel_recipe"], **kw)["out"].astype(np.float32)
        qattn.write_outputs(path, name, [{"layer": "0", "o": o}])
        return path

    files = setup["files"]
    if files == "function":
        def kernel(q, k, v, **call):
            return qattn.emulate(np.asarray(q, np.float32), np.asarray(k, np.float32), np.asarray(v, np.float32), setup["kernel_recipe"],
                                 causal=call["causal"], softmax_scale=call["softmax_scale"])["out"]
        first = kernel
    elif files == "two_kernels":
        first = [outputs("k1.h5", "a"), outputs("k2.h5", "b")]
    elif files == "twice":
        first = [outputs("k1.h5", "a")] * 2
    else:
        first = outputs("k1.h5", "a")
    prefill = setup.get("prefill")
    if prefill:
        earlier = dict(kwargs, resume=False, force=True, budget=0.5, beam=1)
        if prefill == "other_rows":
            earlier["rows"] = 1 if kwargs.get("rows") != 1 else 2
        try:
            qattn.fit(first, "fit-dump.h5", **earlier)
        except (ValueError, TypeError):
            return first, False  # arguments the earlier fit refuses too: the trial is the call itself
        log = "fit-out/candidates.jsonl"
        text = open(log).read() if os.path.exists(log) else ""
        rng = np.random.default_rng(setup["seed"])
        if prefill == "cut" and text:
            text = text[: int(rng.integers(0, len(text)))]
        elif prefill == "nan" and text:
            row = json.loads(text.splitlines()[0])
            row["kernel_vs_recipe_db"] = "nan"
            text = json.dumps(row) + "\n" + text
        elif prefill == "wrong_type" and text:
            row = json.loads(text.splitlines()[0])
            row["line"] = 3
            text = text + json.dumps(row) + "\n"
        elif prefill == "junk":
            text = text + "{not json\n"
        elif prefill == "other_dump":
            fit_dump(setup, setup["seed"] + 1)  # another dump at the same path: the earlier evaluations are of other units
        with open(log, "w") as f:
            f.write(text)
    return first, bool(prefill)


def main():
    call = json.load(open(sys.argv[1]))
    fn = getattr(qattn, call["fn"])
    args = [build(x) for x in call.get("args", [])]
    kwargs = {k: build(x) for k, x in call.get("kwargs", {}).items()}
    try:
        prefilled = False
        if call.get("setup"):
            kernel, prefilled = fit_setup(call["setup"], kwargs)
            args = [kernel, "fit-dump.h5"]
        result = fn(*args, **kwargs)
        if prefilled and call["setup"]["prefill"] in ("other_rows", "other_dump"):
            print(f"STALE a resumed fit over a report of other units ({call['setup']['prefill']}) finished instead of refusing")
        if call.get("check") == "dump":
            try:
                qattn.open_dump(args[0])
            except ValueError as e:
                print(f"WRITER-READER write_dump wrote a file open_dump refuses: {e}")
        elif call.get("check") == "outputs":
            try:
                qattn.read_outputs(args[0])
            except ValueError as e:
                print(f"WRITER-READER write_outputs wrote a file read_outputs refuses: {e}")
        elif call.get("check") == "report":
            for f in report_findings(kwargs["output"]):
                print(f"CORRUPT {f}")
    except (ValueError, TypeError, KeyError, OverflowError, MemoryError, RuntimeError) as e:
        print(f"qattn: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    if call["fn"] == "round_to":
        return  # its results are values of the format, NaN among them (e4m3 of a NaN, e8m0 of x <= 0)
    for f in nonfinite(result if not callable(result) else None, call["fn"]):
        print(f"NAN-RESULT {f}")


if __name__ == "__main__":
    main()
