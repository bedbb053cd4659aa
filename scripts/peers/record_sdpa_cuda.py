#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the GPU, each backend on its own (flash: FlashAttention-2
inside torch; cuDNN's fused kernel; the memory-efficient kernel), in bf16 and fp16: its outputs on
the inputs PyTorch's CPU kernel was recorded on (tests/data/pytorch-2.9.1-cpu: the shipped dump's
layers 7 and 22 and three random inputs), written as qattn-outputs files into OUT_DIR, one per
(input, backend, dtype), 128 query rows a layer (qattn.sample_rows(N, 128, 1)). A backend that
refuses an input (cuDNN at head dim 256, say) is skipped and listed in OUT_DIR/skipped.txt. Run on
the GPU machine with torch and the qattn package importable:
    PYTHONPATH=build/python python3 scripts/peers/record_sdpa_cuda.py OUT_DIR"""
import os
import sys

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import qattn

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CPU_DATA = os.path.join(ROOT, "tests", "data", "pytorch-2.9.1-cpu")
INPUTS = {"smollm2": (os.path.join(ROOT, "datasets", "smollm2-135m-2k.h5"), ["7", "22"])}
for case in ("g2-n600-d128-causal", "h1-n300-d256-full", "g3-n1000-d64-causal"):
    INPUTS[case] = (os.path.join(CPU_DATA, case + ".h5"), ["0"])
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
ROWS = 128


def kernel(q, k, v, causal, scale, dtype, backend):
    """[H, N, d] float32 arrays in; the backend's [Hq, N, d] output as float32 (exact: it is bf16/fp16)."""
    t = [torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to("cuda", dtype)[None] for x in (q, k, v)]
    group = t[0].shape[1] // t[1].shape[1]
    k_, v_ = (x.repeat_interleave(group, dim=1).contiguous() for x in t[1:])
    with sdpa_kernel([BACKENDS[backend]]):
        out = torch.nn.functional.scaled_dot_product_attention(t[0], k_, v_, is_causal=causal, scale=scale)
    torch.cuda.synchronize()
    return out[0].float().cpu().numpy()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: record_sdpa_cuda.py OUT_DIR (the folder the outputs files are written to)")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    device = torch.cuda.get_device_name()
    skipped = []
    for case, (dump, layers) in INPUTS.items():
        loaded = {name: qattn.load_layer(dump, name) for name in layers}
        for backend in BACKENDS:
            for dt, dtype in DTYPES.items():
                entries = []
                try:
                    for name, d in loaded.items():
                        n = d["q"].shape[1]
                        rows = np.asarray(qattn.sample_rows(n, ROWS, 1))
                        o = kernel(d["q"], d["k"], d["v"], bool(d["causal"]), float(d["softmax_scale"]), dtype, backend)
                        entries.append({"layer": name, "o": np.ascontiguousarray(o[:, rows]), "rows": rows, "context": n})
                except RuntimeError as e:  # the backend does not take this input
                    skipped.append(f"{case} {backend} {dt}: {str(e).splitlines()[0]}")
                    continue
                path = os.path.join(out_dir, f"{case}-{backend}-{dt}.h5")
                qattn.write_outputs(path, f"PyTorch {torch.__version__} SDPA {backend} on {device}, {dt}", entries, "", dt,
                                    {"made_by": "scripts/peers/record_sdpa_cuda.py", "cuda": str(torch.version.cuda),
                                     "cudnn": str(torch.backends.cudnn.version())})
                print("wrote", path, flush=True)
    with open(os.path.join(out_dir, "skipped.txt"), "w") as f:
        f.write("".join(s + "\n" for s in skipped))
    print(len(skipped), "skipped")


if __name__ == "__main__":
    main()
