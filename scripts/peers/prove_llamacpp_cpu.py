#!/usr/bin/env python3
"""llama.cpp's flash attention (ggml_flash_attn_ext over a q8_0 / q4_0 / f16 KV cache, run by the
harness scripts/peers/llamacpp_cpu/attn_ggml on ggml's CPU or CUDA backend) on a dump's layers,
written as qattn-outputs/1 files for `qattn score` and `qattn fit`.

CPU (--backend cpu), per cache type: OUT/DUMP-llamacpp-TYPE-cpu.h5 (every row of every layer, causal
as the dump says; prefill in llama.cpp's ubatches; the name after the dump's is the type's preset)
and, for causal dumps, OUT/DUMP-llamacpp-TYPE-cpu-decode.h5 (a seeded sample of rows, each run alone
as single-token decode against keys 0..i; its `rows` dataset names them). f16 decode has a preset of
its own, llamacpp-f16-cpu-decode, whose split is the thread count: with --threads N other than 2
its file is OUT/DUMP-llamacpp-f16-cpu-decode-tN.h5, scored with split=N.
CUDA (--backend cuda): single-row decode runs ggml-cuda's vector kernel, whose presets are
llamacpp-q8_0 and llamacpp-q4_0: OUT/DUMP-llamacpp-TYPE-decode.h5; prefill runs another kernel (the
tensor-core kernel over K and V converted to f16), modelled by no preset: OUT/DUMP-llamacpp-TYPE-cuda.h5
(--prefill-layers; no recipe attribute), for `qattn score --recipe` and `qattn fit`.
scripts/peers/score-peers.sh scores the files named by a preset. --synth makes seeded random dumps
with `qattn synth` instead and does the same for each. --check-threads (CPU) runs the first layer
again with one thread and compares the bytes.

Usage: prove_llamacpp_cpu.py HARNESS OUT (--dump DUMP | --synth QATTN) [--backend cpu|cuda] [--types q8_0,q4_0,f16]
Run with .venv/bin/python and PYTHONPATH=build/python (the qattn package)."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

import qattn

# Each cache type's preset per backend: the recipe attribute of its outputs and the name after the
# dump's. CPU: prefill and decode (f16 decode takes another path, DECODE_PRESETS); CUDA: decode (the
# vector kernel) only, f16 K/V modelled by none.
PRESETS = {
    "cpu": {"q8_0": "llamacpp-q8_0-cpu", "q4_0": "llamacpp-q4_0-cpu", "f16": "llamacpp-f16-cpu"},
    "cuda": {"q8_0": "llamacpp-q8_0", "q4_0": "llamacpp-q4_0", "f16": None},
}
# Decode's own preset where it differs from prefill's: the CPU's f16 decode splits the cache over
# the threads (its recipe takes split=THREADS).
DECODE_PRESETS = {("cpu", "f16"): "llamacpp-f16-cpu-decode"}

# Random inputs: (name, synth options). Small enough for a 2-core machine; N not a multiple of 32.
SYNTH_CASES = [
    ("synth-d64-causal-gqa4-n1000", ["--dim", "64", "--q-heads", "8", "--kv-heads", "2", "--tokens", "1000", "--causal", "1"]),
    ("synth-d128-causal-gqa2-n1000", ["--dim", "128", "--q-heads", "4", "--kv-heads", "2", "--tokens", "1000", "--causal", "1"]),
    ("synth-d64-full-gqa2-n1000", ["--dim", "64", "--q-heads", "4", "--kv-heads", "2", "--tokens", "1000", "--causal", "0"]),
    ("synth-d128-full-mha-n777", ["--dim", "128", "--q-heads", "2", "--kv-heads", "2", "--tokens", "777", "--causal", "0",
                                  "--outlier-channels", "4", "--outlier-ratio", "10", "--sinks", "1"]),
]


def fail(msg):
    sys.exit(f"prove_llamacpp_cpu: {msg}")


def run_harness(harness, d, cache_type, threads, work, decode_rows=None, backend="cpu"):
    """Runs the harness on one layer's tensors; returns float32 [Hq, R, d]."""
    q, k, v = (np.ascontiguousarray(d[x], dtype=np.float32) for x in ("q", "k", "v"))
    hq, n, dim = q.shape
    hkv = k.shape[0]
    paths = {x: os.path.join(work, f"{x}.f32") for x in ("q", "k", "v", "o")}
    for x, arr in (("q", q), ("k", k), ("v", v)):
        arr.tofile(paths[x])
    argv = [harness, "--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--out", paths["o"],
            "--hq", str(hq), "--hkv", str(hkv), "--n", str(n), "--d", str(dim),
            "--scale", repr(float(d["softmax_scale"])), "--type", cache_type,
            "--causal", "1" if d["causal"] else "0", "--threads", str(threads), "--backend", backend]
    if decode_rows is not None:
        argv += ["--decode-rows", ",".join(str(int(r)) for r in decode_rows)]
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        fail(f"{harness} exited with {res.returncode}: {res.stderr.strip()}")
    rows = n if decode_rows is None else len(decode_rows)
    o = np.fromfile(paths["o"], dtype=np.float32)
    if o.size != hq * rows * dim:
        fail(f"{paths['o']}: expected {hq * rows * dim} float32 values [Hq={hq}, R={rows}, d={dim}], got {o.size}")
    o = o.reshape(hq, rows, dim)
    if not np.isfinite(o).all():
        fail(f"{cache_type}: the harness returned a non-finite output")
    return o


def decode_sample(n, count, seed):
    """Seeded rows for single-token decode: spread over [0, N), the last row always included."""
    rng = np.random.default_rng(seed)
    rows = set(rng.choice(n, size=min(count, n), replace=False).tolist())
    rows.add(n - 1)
    return sorted(rows)


def prove_dump(a, dump, out, work):
    tag = os.path.splitext(os.path.basename(dump))[0] + "-"
    info = qattn.open_dump(dump)
    layers = [l["name"] for l in info["layers"]]
    if a.layers:
        wanted = a.layers.split(",")
        missing = [l for l in wanted if l not in layers]
        if missing:
            fail(f"{dump}: layers {missing} are not in the dump (it has {layers})")
        layers = wanted
    data = {l: qattn.load_layer(dump, l) for l in layers}
    causal = all(bool(data[l]["causal"]) for l in layers)
    if any(data[l]["window"] for l in layers):
        fail(f"{dump}: a layer has a sliding window; this harness has no window mask")
    n = data[layers[0]]["q"].shape[1]
    rows = decode_sample(n, a.decode_rows, a.seed) if causal and a.decode_rows > 0 else None
    attrs = {"dataset": os.path.basename(dump), "harness": "scripts/peers/llamacpp_cpu/attn_ggml", "backend": a.backend,
             "threads": str(a.threads), "ggml": a.ggml_version}
    presets = PRESETS[a.backend]
    prefill_layers = layers
    if a.prefill_layers:
        prefill_layers = a.prefill_layers.split(",")
        missing = [l for l in prefill_layers if l not in data]
        if missing:
            fail(f"--prefill-layers: {missing} are not among the layers run ({layers})")

    def run(l, t, r=None, threads=a.threads):
        return run_harness(a.harness, data[l], t, threads, work, r, a.backend)

    written = []
    for t in a.types.split(","):
        if t not in presets:
            fail(f"--types: '{t}' is not one of {sorted(presets)}")
        preset = presets[t]
        # CPU prefill is the preset's kernel; CUDA prefill is another kernel than the preset's (decode's).
        prefill_name = preset if a.backend == "cpu" else f"llamacpp-{t}-cuda"
        entries = [{"layer": l, "o": run(l, t)} for l in prefill_layers]
        path = os.path.join(out, f"{tag}{prefill_name}.h5")
        qattn.write_outputs(path, prefill_name, entries, recipe=f"preset={preset}" if a.backend == "cpu" else "", attrs=attrs)
        written.append(path)
        if rows is not None and preset is not None:
            dec = [{"layer": l, "o": run(l, t, rows), "rows": np.array(rows, dtype=np.int64)} for l in layers]
            own = DECODE_PRESETS.get((a.backend, t))
            # The preset's split is 2 threads; another count is in the name (PRESET-tN), which
            # score-peers.sh reads back as split=N.
            name = (own if a.threads == 2 else f"{own}-t{a.threads}") if own else f"{preset}-decode"
            recipe = f"preset={own} split={a.threads}" if own else f"preset={preset}"
            path = os.path.join(out, f"{tag}{name}.h5")
            qattn.write_outputs(path, name, dec, recipe=recipe, attrs=attrs)
            written.append(path)
        if a.check_threads and a.backend == "cpu":
            for mode, r in (("prefill", None), ("decode", rows)):
                if mode == "decode" and r is None:
                    continue
                one = run(layers[0], t, r, threads=1)
                many = run(layers[0], t, r)
                same = one.tobytes() == many.tobytes()
                diff = "" if same else f" ({int((one != many).sum())} of {one.size} values differ, max |diff| {float(np.abs(one - many).max()):.3g})"
                print(f"threads 1 vs {a.threads}, {tag}{t} {mode} layer {layers[0]}: {'bit-equal' if same else 'DIFFERENT'}{diff}")
    for p in written:
        print(p)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("harness", help="the attn_ggml binary")
    ap.add_argument("out", help="output folder")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--dump", help="a qattn-dump/1 file")
    src.add_argument("--synth", metavar="QATTN", help="the qattn binary: make seeded random dumps with `qattn synth` (into OUT/inputs)")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu", help="ggml's backend (cuda: the harness built against ggml-cuda)")
    ap.add_argument("--types", default="q8_0,q4_0,f16", help="cache types, comma-separated (q8_0, q4_0, f16)")
    ap.add_argument("--layers", default="", help="layer names, comma-separated (default: all)")
    ap.add_argument("--prefill-layers", default="", help="layers run as prefill, comma-separated (default: every layer run)")
    ap.add_argument("--decode-rows", type=int, default=32, help="rows sampled for single-token decode (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check-threads", action="store_true", help="also run the first layer with 1 thread and compare bytes")
    ap.add_argument("--ggml-version", default="ggml d99724f", help="recorded in the outputs' attributes")
    a = ap.parse_args()
    if not os.access(a.harness, os.X_OK):
        fail(f"{a.harness}: not an executable (build scripts/peers/llamacpp_cpu first)")
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="prove_llamacpp_cpu.") as work:
        if a.dump:
            prove_dump(a, a.dump, a.out, work)
            return
        inputs = os.path.join(a.out, "inputs")
        os.makedirs(inputs, exist_ok=True)
        for i, (name, opts) in enumerate(SYNTH_CASES):
            dump = os.path.join(inputs, f"{name}.h5")
            argv = [a.synth, "synth", "--out", dump, "--seed", str(a.seed + i), "--dtype", "fp32", "--force"] + opts
            res = subprocess.run(argv, capture_output=True, text=True)
            if res.returncode != 0:
                fail(f"{' '.join(argv)} exited with {res.returncode}: {res.stderr.strip()}")
            prove_dump(a, dump, a.out, work)


if __name__ == "__main__":
    main()
