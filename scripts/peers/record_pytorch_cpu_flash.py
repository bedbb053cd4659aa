#!/usr/bin/env python3
"""PyTorch's CPU flash attention (aten._scaled_dot_product_flash_attention_for_cpu) in bf16 and fp16:
its outputs on the shipped dump (layers 7 and 22 at 2048 tokens, causal) and on three random inputs
(GQA, head dims 64 / 128 / 256, causal and not, N not a multiple of the kernel's 512-key or 16-key
blocks), written as qattn-outputs files into OUT_DIR (tests/data/pytorch-2.9.1-cpu holds them). Run
in the dumper's environment, where torch is installed, with the qattn package importable:
    PYTHONPATH=build/python .venv-dump/bin/python scripts/peers/record_pytorch_cpu_flash.py OUT_DIR
The kernel's vector width follows the CPU (ATen dispatches AVX512 or AVX2 builds): the files record
which it was; the lab's presets model the AVX512 build's 16-float vectors."""
import os
import sys

import numpy as np
import torch

import qattn

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SHIPPED = os.path.join(ROOT, "datasets", "smollm2-135m-2k.h5")
# name: (query heads, KV heads, tokens, head dim, causal, seed)
RANDOM = {"g2-n600-d128-causal": (2, 1, 600, 128, True, 11), "h1-n300-d256-full": (1, 1, 300, 256, False, 12),
          "g3-n1000-d64-causal": (3, 1, 1000, 64, True, 13)}
ROWS = 128  # sampled query rows per layer (qattn.sample_rows(N, 128, 1))
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def kernel(q, k, v, causal, scale, dtype):
    """[H, N, d] float32 arrays in; the kernel's [Hq, N, d] output as float32 (exact: it is bf16/fp16)."""
    t = [torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dtype)[None] for x in (q, k, v)]
    group = t[0].shape[1] // t[1].shape[1]
    k_, v_ = (x.repeat_interleave(group, dim=1) for x in t[1:])
    out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(t[0], k_, v_, 0.0, causal, scale=scale)[0]
    return out[0].float().numpy()


def record(dump, layers, out_path, dtype_name):
    entries = []
    for name in layers:
        d = qattn.load_layer(dump, name)
        n = d["q"].shape[1]
        rows = np.asarray(qattn.sample_rows(n, ROWS, 1))
        o = kernel(d["q"], d["k"], d["v"], bool(d["causal"]), float(d["softmax_scale"]), DTYPES[dtype_name])
        entries.append({"layer": name, "o": np.ascontiguousarray(o[:, rows]), "rows": rows, "context": n})
    qattn.write_outputs(out_path, f"PyTorch {torch.__version__} CPU flash attention ({torch.backends.cpu.get_cpu_capability()}), {dtype_name}",
                        entries, "", dtype_name, {"made_by": "scripts/peers/record_pytorch_cpu_flash.py", "torch_threads": str(torch.get_num_threads())})
    print("wrote", out_path)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(2)
    for case, (hq, hkv, n, d, causal, seed) in RANDOM.items():
        rng = np.random.default_rng(seed)
        q, k, v = (rng.standard_normal((h, n, d)).astype(np.float32) for h in (hq, hkv, hkv))
        path = os.path.join(out, case + ".h5")
        qattn.write_dump(path, [{"name": "0", "q": q, "k": k, "v": v, "causal": causal, "softmax_scale": 0.0}],
                         {"schema": "qattn-dump/1", "model": "random normal inputs", "weights": "none", "text_source": f"numpy seed {seed}",
                          "n_tokens": n, "created_by": "scripts/peers/record_pytorch_cpu_flash.py", "created_at": "2026-12-07T00:00:00Z"}, "fp16")
        for dt in DTYPES:
            record(path, ["0"], os.path.join(out, f"{case}-{dt}.h5"), dt)
    for dt in DTYPES:
        record(SHIPPED, ["7", "22"], os.path.join(out, f"smollm2-{dt}.h5"), dt)


if __name__ == "__main__":
    main()
