#!/usr/bin/env python3
"""Run QFlash's published Triton kernel (github EfficientCompLab/qflash at 46adca5, qflash/kernel.py;
not part of the project: pass the file's path) on seeded random inputs and write, per case, a
qattn-dump/1 file of the inputs and a qattn-outputs/1 file of the kernel's outputs (h5py), for
`qattn score` to compare with the lab's presets.

Cases: fp16 uniform [-4, 4) inputs (QFlash's benchmark distribution) and normal inputs, shapes
with N a multiple of the 32-key tile and not, head dims 32, 64, 128 and 256; one batch (Z = 1),
so the kernel's per-tensor scale is the lab's int8/tensor. The kernel is non-causal.

Usage: capture_qflash.py --kernel PATH/kernel.py --out DIR
"""
import argparse
import importlib.util
import os

import h5py
import numpy as np
import torch

CASES = [  # (name, H, N, d, distribution, seed): uniform [-A, A) as "uniform:A"
    ("u-h3-n197-d64", 3, 197, 64, "uniform:4", 11),
    ("u-h6-n197-d64", 6, 197, 64, "uniform:4", 12),
    ("u-h4-n49-d32", 4, 49, 32, "uniform:4", 13),
    ("u-h2-n256-d64", 2, 256, 64, "uniform:4", 14),
    ("n-h4-n300-d128", 4, 300, 128, "normal", 15),
    ("n-h2-n130-d256", 2, 130, 256, "normal", 16),
    ("u-h2-n1000-d128", 2, 1000, 128, "uniform:4", 17),
    # Large activations: I0 of about 620 and 56, where the kernel's start values, padded tail and
    # int32/int8 wraparounds come into play.
    ("u12-h2-n77-d128", 2, 77, 128, "uniform:12", 18),
    ("u40-h2-n100-d64", 2, 100, 64, "uniform:40", 19),
]


def write_case(out, name, q, k, v, o):
    h, n, d = q.shape
    dump, outs = os.path.join(out, f"{name}.h5"), os.path.join(out, f"{name}-qflash.h5")
    with h5py.File(dump, "w") as f:
        for key, val in dict(schema="qattn-dump/1", model=f"random {name}", weights="none", text_source="none",
                             created_by="scripts/peers/capture_qflash.py", created_at="capture").items():
            f.attrs[key] = val
        f.attrs["n_tokens"] = np.int64(n)
        g = f.create_group("layers/0")
        for key, val in (("q", q), ("k", k), ("v", v)):
            g.create_dataset(key, data=val)
        g.attrs["causal"] = np.int64(0)
        g.attrs["sliding_window"] = np.int64(0)
        g.attrs["softmax_scale"] = float(1 / np.sqrt(d))
        g.attrs["rope"] = "none"
    with h5py.File(outs, "w") as f:
        f.attrs["schema"] = "qattn-outputs/1"
        f.attrs["kernel"] = "qflash-46adca5"
        f.create_dataset("layers/0/o", data=o)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("qflash_kernel", a.kernel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    os.makedirs(a.out, exist_ok=True)
    for name, h, n, d, dist, seed in CASES:
        g = torch.Generator(device="cuda").manual_seed(seed)
        shape = (3, 1, h, n, d)
        if dist.startswith("uniform:"):
            amp = float(dist.split(":")[1])
            x = torch.rand(shape, generator=g, device="cuda", dtype=torch.float16) * (2 * amp) - amp
        else:
            x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float16)
        q, k, v = x[0].contiguous(), x[1].contiguous(), x[2].contiguous()
        o = mod.qflash_forward(q, k, v)
        torch.cuda.synchronize()
        write_case(a.out, name, q[0].cpu().numpy(), k[0].cpu().numpy(), v[0].cpu().numpy(), o[0].cpu().numpy())
        print(f"{name}: out {tuple(o.shape)} {o.dtype}, finite {bool(torch.isfinite(o).all())}")


if __name__ == "__main__":
    main()
