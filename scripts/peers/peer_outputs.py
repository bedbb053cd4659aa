"""What every peer proof does around the peer's own call: each layer of each dump loaded with qattn,
passed to the peer as torch tensors on the GPU, and the outputs written as a qattn-outputs/1 file
beside the dump's name, for `qattn score` and `qattn fit` (which may run on another machine)."""
import os

import numpy as np
import torch

import qattn


def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def layer_tensors(layer):
    """Q [Hq, N, d], K and V [Hkv, N, d] of a loaded layer, as float32 tensors on the GPU."""
    return tuple(torch.from_numpy(np.ascontiguousarray(layer[x])).float().to(device()) for x in ("q", "k", "v"))


def write_peer_outputs(dump, out_dir, name, run_layer, recipe, dtype, rows=0):
    """run_layer(layer) -> O [Hq, N, d] as a NumPy array, for each layer of `dump` (the loaded layer,
    with its name under "name"); writes OUT_DIR/<dump's stem>-<name>.h5 (every row, or `rows` query
    rows a layer, qattn.sample_rows(N, rows, 1), as the recorded files in tests/data keep them) and
    returns its path."""
    info = qattn.open_dump(dump)
    entries = []
    for l in info["layers"]:
        o = run_layer({**qattn.load_layer(dump, l["name"]), "name": l["name"]})
        entry = {"layer": l["name"], "o": o}
        if rows:
            picked = np.asarray(qattn.sample_rows(o.shape[1], rows, 1))
            entry = {"layer": l["name"], "o": np.ascontiguousarray(o[:, picked]), "rows": picked}
        entries.append(entry)
    stem = os.path.splitext(os.path.basename(dump))[0]
    path = os.path.join(out_dir, f"{stem}-{name}.h5")
    qattn.write_outputs(path, name, entries, recipe=recipe, dtype=dtype, attrs={"dataset": os.path.basename(dump)})
    print(f"{name}: {dump}: {len(entries)} layers -> {path}", flush=True)
    return path


def prove(doc, load_peer, kernels):
    """A proof script's command line, `--out DIR DUMP [DUMP ...]`: load_peer() -> the peer's call;
    kernels: (name, run_layer(peer, layer), recipe, dtype) for each form of the peer that runs."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=0, help="query rows kept a layer (sampled; 0: every row)")
    ap.add_argument("dumps", nargs="+")
    a = ap.parse_args()
    peer = load_peer()
    os.makedirs(a.out, exist_ok=True)
    for dump in a.dumps:
        for name, run_layer, recipe, dtype in kernels:
            write_peer_outputs(dump, a.out, name, lambda layer: run_layer(peer, layer), recipe, dtype, a.rows)
