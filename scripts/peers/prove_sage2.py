#!/usr/bin/env python3
"""SageAttention 2's fp8 kernels (github thu-ml/SageAttention at d1a57a5, built from source on an
sm90 GPU: prove-peers-on-h200.sh) on every layer of each dump, with their defaults and fp16 inputs
[1, H, N, d]: sageattn_qk_int8_pv_fp8_cuda_sm90 (per-thread int8 Q K^T with K's mean removed, e4m3
P V with fp32+fp32 accumulation; preset sageattn2-sm90) and sageattn_qk_int8_pv_fp8_cuda, the sm89
kernel, compiled for sm90 by the same build (its fp32+fp16 default; preset sageattn2-sm89). The
outputs are written as qattn-outputs/1 files for `qattn score` and `qattn fit`. The peer is not part
of the project: put its built folder on PYTHONPATH.
Usage: prove_sage2.py --out DIR DUMP [DUMP ...]"""
import sys

from peer_outputs import layer_tensors, prove


def sage2():
    try:
        from sageattention.core import sageattn_qk_int8_pv_fp8_cuda, sageattn_qk_int8_pv_fp8_cuda_sm90
    except ImportError as e:
        sys.exit(f"prove_sage2: SageAttention 2 is not importable ({e}); build it (scripts/peers/prove-peers-on-h200.sh) "
                 "and put its folder on PYTHONPATH")
    return {"sm90": sageattn_qk_int8_pv_fp8_cuda_sm90, "sm89": sageattn_qk_int8_pv_fp8_cuda}


def run_layer(attn, layer):
    """attn: one of the kernels; returns O [Hq, N, d] (fp16 values)."""
    if layer["window"]:
        raise SystemExit("prove_sage2: SageAttention 2 has no sliding window; the dump's layer has one")
    q, k, v = (x.half().unsqueeze(0).contiguous() for x in layer_tensors(layer))
    # GQA as the kernel takes it: K and V with the KV heads, query head h reading KV head h / (Hq / Hkv).
    o = attn(q, k, v, tensor_layout="HND", is_causal=bool(layer["causal"]), sm_scale=float(layer["softmax_scale"]))
    return o[0].float().cpu().numpy()  # [Hq, N, d], fp16 values


def main():
    prove(__doc__, sage2, [(f"sageattn2-{arch}", lambda kernels, layer, arch=arch: run_layer(kernels[arch], layer),
                             f"preset=sageattn2-{arch}", "fp16") for arch in ("sm90", "sm89")])


if __name__ == "__main__":
    main()
