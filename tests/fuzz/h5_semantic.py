#!/usr/bin/env python3
"""Semantic HDF5 mutants for tests/fuzz/fuzz.py (needs h5py; fuzz.py runs it with
/work/main/.venv-dump/bin/python when that exists, and skips semantic mutants otherwise).

  h5_semantic.py SRC.h5 OUTDIR      write OUTDIR/<name>.h5 per mutant, print a JSON list
                                    [{"name", "file", "desc"}] on stdout
  h5_semantic.py --layout SRC.h5    print {"datasets": {path: {offset, nbytes, dtype, shape}},
                                    "attrs": {group: {name: value}}}: the raw byte ranges and the
                                    numeric attributes fuzz.py overwrites with extreme values
                                    (stdlib only; the corpus keeps these as SEED.h5.layout.json)

Every mutant is a copy of SRC with one schema-level change (qattn-dump/1: root attrs schema, model,
n_tokens...; /layers/<L>/{q,k,v} [H, N, d]; group attrs causal, sliding_window, softmax_scale,
rope). The list is fixed, so the output is deterministic for a given SRC.
"""
import json
import os
import shutil
import sys

import h5py
import numpy as np


def layout(src):
    """Raw byte ranges of the contiguous datasets, and the scalar numeric attributes (whose encoded
    values fuzz.py finds after the attribute's name in the file)."""
    out = {"datasets": {}, "attrs": {}}

    def attrs(name, obj):
        num = {k: v.item() for k, v in obj.attrs.items() if isinstance(v, np.generic) and np.issubdtype(v.dtype, np.number)}
        if num:
            out["attrs"][name] = num

    with h5py.File(src, "r") as f:
        attrs("/", f)

        def visit(name, obj):
            attrs(name, obj)
            if isinstance(obj, h5py.Dataset) and obj.chunks is None and obj.id.get_offset() is not None:
                out["datasets"][name] = {"offset": int(obj.id.get_offset()), "nbytes": int(obj.id.get_storage_size()),
                                         "dtype": obj.dtype.str, "shape": list(obj.shape)}
        f.visititems(visit)
    return out


def set_attr(path, key, value):
    def op(f):
        f[path].attrs[key] = value
    return op


def del_attr(path, key):
    def op(f):
        del f[path].attrs[key]
    return op


def del_obj(path):
    def op(f):
        del f[path]
    return op


def replace_ds(path, make, **kw):
    """Replace dataset `path` by make(old numpy array)."""
    def op(f):
        old = f[path][()]
        new = make(old)
        del f[path]
        f.create_dataset(path, data=new, **kw)
    return op


def poke(path, value, where="one"):
    def op(f):
        a = f[path][()].astype(np.float64)
        if where == "one":
            a.flat[a.size // 3] = value
        elif where == "row":
            a[0, a.shape[1] // 2, :] = value
        else:
            a[...] = value
        with np.errstate(over="ignore", invalid="ignore"):
            f[path][...] = a.astype(f[path].dtype)
    return op


def mutants():
    L0 = "layers/0"
    m = []
    add = lambda name, desc, op: m.append((name, desc, op))
    for v, tag in [(1e300, "1e300"), (0.0, "0"), (-1.0, "neg"), (float("nan"), "nan"), (float("inf"), "inf"), (1e-300, "tiny")]:
        add(f"scale-{tag}", f"{L0} softmax_scale = {v!r}", set_attr(L0, "softmax_scale", v))
    add("scale-str", "softmax_scale as a string", set_attr(L0, "softmax_scale", "0.125"))
    add("scale-array", "softmax_scale as a 2-element array", set_attr(L0, "softmax_scale", np.array([0.1, 0.2])))
    add("scale-missing", "softmax_scale deleted", del_attr(L0, "softmax_scale"))
    for v in [2147483647, 2**32, 2**63 - 1, -1, 1, 2**31]:
        dt = np.uint64 if v >= 2**63 else np.int64
        add(f"window-{v}", f"{L0} sliding_window = {v}", set_attr(L0, "sliding_window", dt(v)))
    add("window-float", "sliding_window = 1.5 (float)", set_attr(L0, "sliding_window", 1.5))
    add("window-str", "sliding_window as a string", set_attr(L0, "sliding_window", "32"))
    for v in [2, -1]:
        add(f"causal-{v}", f"{L0} causal = {v}", set_attr(L0, "causal", np.int64(v)))
    add("causal-str", "causal = 'yes'", set_attr(L0, "causal", "yes"))
    add("causal-missing", "causal deleted", del_attr(L0, "causal"))
    add("rope-bogus", "rope = 'sometimes'", set_attr(L0, "rope", "sometimes"))
    add("rope-int", "rope = 1 (int)", set_attr(L0, "rope", np.int64(1)))
    add("schema-v2", "schema = qattn-dump/2", set_attr("/", "schema", "qattn-dump/2"))
    add("schema-missing", "schema deleted", del_attr("/", "schema"))
    add("schema-int", "schema = 1 (int)", set_attr("/", "schema", np.int64(1)))
    for v in [0, -1, 2**40, 63]:
        add(f"ntokens-{v}", f"n_tokens = {v}", set_attr("/", "n_tokens", np.int64(v)))
    add("ntokens-str", "n_tokens as a string", set_attr("/", "n_tokens", "64"))
    add("model-int", "model = 5 (int)", set_attr("/", "model", np.int64(5)))
    add("model-huge", "model = 1 MB string", set_attr("/", "model", "m" * 100000))
    add("no-k", f"{L0}/k deleted", del_obj(f"{L0}/k"))
    add("no-q", f"{L0}/q deleted", del_obj(f"{L0}/q"))
    add("no-layers", "/layers deleted", del_obj("layers"))
    add("layers-empty", "all layers deleted", lambda f: [f["layers"].__delitem__(k) for k in list(f["layers"].keys())])
    add("layer-extra", "extra empty layer group 'abc'", lambda f: f["layers"].create_group("abc"))
    add("layer-neg", "layer 1 renamed to '-1'", lambda f: f["layers"].move("1", "-1"))
    add("layer-zero-pad", "layer 1 renamed to '01'", lambda f: f["layers"].move("1", "01"))
    add("layer-as-ds", "layer 1 replaced by a dataset", lambda f: (f["layers"].__delitem__("1"), f["layers"].create_dataset("1", data=np.zeros(3))))
    add("q-as-group", f"{L0}/q replaced by a group", lambda f: (f[L0].__delitem__("q"), f[L0].create_group("q")))
    add("q-d+1", "q head dim + 1", replace_ds(f"{L0}/q", lambda a: np.concatenate([a, a[..., :1]], axis=-1)))
    add("q-odd-d", "q, k, v head dim 31 (odd)", lambda f: [replace_ds(f"{L0}/{x}", lambda a: a[..., :-1])(f) for x in "qkv"])
    add("q-3heads", "q with one more head (Hq + 1)", replace_ds(f"{L0}/q", lambda a: np.concatenate([a, a[:1]], axis=0)))
    add("gqa-3-2", "q 3 heads, k and v 2 heads (Hq not a multiple of Hkv)", lambda f: [replace_ds(f"{L0}/q", lambda a: np.concatenate([a, a[:1]], axis=0))(f)] + [replace_ds(f"{L0}/{x}", lambda a: np.concatenate([a, a], axis=0))(f) for x in "kv"])
    add("k-short", "k one token short", replace_ds(f"{L0}/k", lambda a: a[:, :-1, :]))
    add("v-d-differs", "v head dim halved", replace_ds(f"{L0}/v", lambda a: a[..., : a.shape[-1] // 2]))
    add("k-2heads", "k and v with 2x the heads (more KV than Q heads?)", lambda f: [replace_ds(f"{L0}/{x}", lambda a: np.concatenate([a, a, a, a], axis=0))(f) for x in "kv"])
    add("q-1d", "q flattened to 1-D", replace_ds(f"{L0}/q", lambda a: a.reshape(-1)))
    add("q-4d", "q with an extra leading axis", replace_ds(f"{L0}/q", lambda a: a[None]))
    add("q-scalar", "q a scalar", replace_ds(f"{L0}/q", lambda a: np.float32(1.0)))
    add("qkv-empty", "q, k, v with 0 tokens", lambda f: [replace_ds(f"{L0}/{x}", lambda a: a[:, :0, :])(f) for x in "qkv"])
    add("q-int32", "q stored as int32", replace_ds(f"{L0}/q", lambda a: a.astype(np.int32)))
    add("q-f64", "q stored as float64", replace_ds(f"{L0}/q", lambda a: a.astype(np.float64)))
    add("q-u8", "q stored as uint8", replace_ds(f"{L0}/q", lambda a: a.astype(np.uint8)))
    add("q-str", "q stored as strings", replace_ds(f"{L0}/q", lambda a: np.array([b"x"] * 4)))
    add("q-complex", "q stored as complex64", replace_ds(f"{L0}/q", lambda a: a.astype(np.complex64)))
    add("q-gzip", "q chunked + gzip", replace_ds(f"{L0}/q", lambda a: a, chunks=True, compression="gzip"))
    add("k-chunked", "k chunked, no filter", replace_ds(f"{L0}/k", lambda a: a, chunks=True))
    for x in "qkv":
        add(f"{x}-nan", f"one NaN in {L0}/{x}", poke(f"{L0}/{x}", float("nan")))
        add(f"{x}-inf", f"one +inf in {L0}/{x}", poke(f"{L0}/{x}", float("inf")))
        add(f"{x}-zero", f"{L0}/{x} all zeros", poke(f"{L0}/{x}", 0.0, "all"))
        add(f"{x}-65504", f"{L0}/{x} all 65504 (fp16 max)", poke(f"{L0}/{x}", 65504.0, "all"))
        add(f"{x}-row-3e38", f"q, k, v cast to float32, one token row of {L0}/{x} = 3e38", _f32_then(L0, x, lambda a: _row(a, 3e38)))
        add(f"{x}-1e20", f"q, k, v cast to float32, one value of {L0}/{x} = 1e20", _f32_then(L0, x, lambda a: _one(a, 1e20)))
        add(f"{x}-all-1e19", f"q, k, v cast to float32, {L0}/{x} all +-1e19", _f32_then(L0, x, lambda a: np.where(a < 0, -1e19, 1e19).astype(np.float32)))
    add("k-denormal", f"q, k, v cast to float32, {L0}/k all 1e-42 (float32 denormal)", _f32_then(L0, "k", lambda a: np.full(a.shape, 1e-42, np.float32)))
    add("q-denormal", f"q, k, v cast to float32, {L0}/q all 1e-42", _f32_then(L0, "q", lambda a: np.full(a.shape, 1e-42, np.float32)))
    add("tokens-bad", "/tokens as float with the wrong length", lambda f: f.create_dataset("tokens", data=np.zeros(5, np.float32)))
    return m


def _f32_then(group, x, change):
    """Cast q, k and v of `group` to float32 (one dtype for all three), then change `x`."""
    def op(f):
        for y in "qkv":
            a = f[f"{group}/{y}"][()].astype(np.float32)
            if y == x:
                a = change(a)
            del f[f"{group}/{y}"]
            f.create_dataset(f"{group}/{y}", data=a)
    return op


def _row(a, v):
    a = a.copy()
    a[0, a.shape[1] // 2, :] = v
    return a


def _one(a, v):
    a = a.copy()
    a.flat[a.size // 2] = v
    return a


def main():
    if sys.argv[1] == "--layout":
        print(json.dumps(layout(sys.argv[2])))
        return
    src, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    done = []
    for name, desc, op in mutants():
        dst = os.path.join(outdir, name + ".h5")
        shutil.copyfile(src, dst)
        try:
            with h5py.File(dst, "r+") as f:
                op(f)
        except Exception as e:  # a mutant that h5py cannot make is skipped, not fatal
            os.unlink(dst)
            print(f"h5_semantic: skipped {name}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        done.append({"name": name, "file": dst, "desc": desc})
    print(json.dumps(done))


if __name__ == "__main__":
    main()
