#!/usr/bin/env python3
"""Score SageAttention 1.0.6 (the PyPI wheel, Triton) with the lab, on the GPU machine.

The peer is not part of the project: pass the folder it is installed in (e.g. `pip install --no-index
--no-deps --target /tmp/site sageattention-1.0.6-py3-none-any.whl`, then `--peer /tmp/site`).
Inputs: the shipped SmolLM2 dump (layers 0, 15, 29, causal, all 2048 rows) and random dumps written
here (fp16 normal inputs with a per-channel K offset, N = 1000 so no tile is full, head dims 64 and
128, causal and not). For each, SageAttention's outputs are written to a qattn-outputs/1 file with
h5py (the documented schema, by a writer that is not the lab's) and scored by `qattn score` against
float64 and against the recipe named by --recipe; when the Python package imports, the same is done
through qattn.score(fn, ...) and the two reports must agree to the last digit.

Usage: score_sageattention.py --peer SITE [--qattn BUILD/harness/qattn] --out DIR [--recipe LINE]
"""
import argparse
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import torch

NEAREST = ("q=int8/block:128 k=int8/block:64 ksmooth=global acc.qk=exact p=fp16 v=fp16 denominator=float "
           "tiles=128x64 acc.pv=fp32")


def sage_fn(sageattn):
    def fn(q, k, v, *, causal, window, softmax_scale):
        if window:
            raise ValueError("SageAttention 1.0.6 has no sliding window")
        g = q.shape[1] // k.shape[1]
        # GQA by repeating K/V heads (the same attention); SageAttention subtracts K's mean in place,
        # so it gets its own copy.
        k = k.repeat_interleave(g, dim=1).contiguous()
        v = v.repeat_interleave(g, dim=1).contiguous()
        return sageattn(q.contiguous(), k, v, tensor_layout="HND", is_causal=causal, sm_scale=softmax_scale)
    fn.__name__ = "sageattention-1.0.6"
    return fn


def write_random_dump(path, d, causal, seed, n=1000, hq=4, hkv=2):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((hq, n, d)).astype(np.float16)
    k = (rng.standard_normal((hkv, n, d)) + 3.0 * rng.standard_normal((hkv, 1, d))).astype(np.float16)
    v = rng.standard_normal((hkv, n, d)).astype(np.float16)
    with h5py.File(path + ".tmp", "w") as f:
        for key, val in dict(schema="qattn-dump/1", model=f"random normal, K channel offsets, seed {seed}", weights="none",
                             text_source="none", created_by="scripts/peers/score_sageattention.py", created_at="now").items():
            f.attrs[key] = val
        f.attrs["n_tokens"] = np.int64(n)
        g = f.create_group("layers/0")
        for key, val in (("q", q), ("k", k), ("v", v)):
            g.create_dataset(key, data=val)
        g.attrs["causal"] = np.int64(causal)
        g.attrs["sliding_window"] = np.int64(0)
        g.attrs["softmax_scale"] = float(1 / np.sqrt(d))
        g.attrs["rope"] = "none"
    os.replace(path + ".tmp", path)


def run_on_dump(fn, dump, layers, out_h5, recipe):
    """SageAttention on every layer of the dump, written with h5py as qattn-outputs/1."""
    with h5py.File(dump, "r") as src, h5py.File(out_h5 + ".tmp", "w") as dst:
        dst.attrs["schema"] = "qattn-outputs/1"
        dst.attrs["kernel"] = fn.__name__
        dst.attrs["recipe"] = recipe
        for name in layers:
            g = src["layers"][name]
            q, k, v = (torch.from_numpy(np.asarray(g[x]).astype(np.float16)).cuda()[None] for x in ("q", "k", "v"))
            o = fn(q, k, v, causal=bool(g.attrs["causal"]), window=int(g.attrs["sliding_window"]), softmax_scale=float(g.attrs["softmax_scale"]))
            dst.create_dataset(f"layers/{name}/o", data=o[0].cpu().numpy())  # as the kernel returns it (fp16)
    os.replace(out_h5 + ".tmp", out_h5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True, help="folder holding the sageattention package")
    ap.add_argument("--qattn", help="the qattn executable (omitted: only write the inputs and SageAttention's outputs)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--recipe", default=NEAREST)
    ap.add_argument("--no-python", action="store_true", help="score with the CLI only (not also through qattn.score)")
    ap.add_argument("--dump", default=os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "smollm2-135m-2k.h5"))
    a = ap.parse_args()
    sys.path.insert(0, a.peer)
    from sageattention.core import sageattn  # noqa: E402

    fn = sage_fn(sageattn)
    os.makedirs(a.out, exist_ok=True)
    cases = [("shipped", a.dump, ["0", "15", "29"])]
    for d in (64, 128):
        for causal in (0, 1):
            path = os.path.join(a.out, f"random-d{d}-{'causal' if causal else 'full'}.h5")
            write_random_dump(path, d, causal, seed=1000 + 2 * d + causal)
            cases.append((f"random d={d} {'causal' if causal else 'full'}", path, ["0"]))
    table = []
    for label, dump, layers in cases:
        out_h5 = os.path.join(a.out, label.replace(" ", "_").replace("=", "") + "-outputs.h5")
        run_on_dump(fn, dump, layers, out_h5, a.recipe)
        print(f"{label}: wrote {out_h5}")
        if not a.qattn:
            continue
        report = out_h5[:-3] + "-report"
        subprocess.run([a.qattn, "score", dump, out_h5, "--output", report, "--force", "--quiet"], check=True)
        rows = [json.loads(line) for line in open(os.path.join(report, "results.jsonl"))]
        for layer in layers:
            sel = [r for r in rows if str(r["layer"]) == layer]
            mean = lambda key: sum(float(r[key]) for r in sel) / len(sel)  # noqa: E731
            table.append((label, layer, mean("sqnr_db"), mean("recipe_sqnr_db"), mean("kernel_vs_recipe_sqnr_db"),
                          min(float(r["kernel_vs_recipe_sqnr_db"]) for r in sel)))
    if not a.qattn or a.no_python:
        print_table(a.recipe, table)
        return
    try:
        import qattn

        rows = qattn.score(lambda q, k, v, **kw: fn(q, k, v, **kw), a.dump, layers=["0", "15", "29"], recipe=a.recipe, tensor="torch",
                           device="cuda", dtype="float16", layout="BHND", kernel=fn.__name__, output=os.path.join(a.out, "python-report"),
                           force=True)
        cli = [json.loads(line) for line in open(os.path.join(a.out, "shipped-outputs-report", "results.jsonl"))]
        same = len(rows) == len(cli) and all(x["sqnr_db"] == y["sqnr_db"] and x["kernel_vs_recipe_sqnr_db"] == y["kernel_vs_recipe_sqnr_db"] for x, y in zip(rows, cli))
        print(f"qattn.score on the shipped dump: {len(rows)} rows, identical to qattn score's: {same}")
    except ImportError as e:
        print(f"qattn Python package not importable here ({e}); CLI scoring only")
    print_table(a.recipe, table)


def print_table(recipe, table):
    print(f"recipe: {recipe}")
    print("| inputs | layer | SageAttention vs float64 | recipe vs float64 | kernel vs recipe (mean of heads) | (worst head) |")
    print("|---|---|---:|---:|---:|---:|")
    for label, layer, k, r, kr, krw in table:
        print(f"| {label} | {layer} | {k:.2f} | {r:.2f} | {kr:.2f} | {krw:.2f} |")


if __name__ == "__main__":
    main()
