#!/usr/bin/env python3
"""FlashAttention-3's forward kernel (PyPI fa3-fwd 0.0.3: FA3's hopper/ forward for sm90) on every
layer of a dump, in fp8 e4m3 and in bf16, with the inputs prepared the way its API takes them; the
outputs are written as qattn-outputs/1 files for `qattn score` and `qattn fit`. The peer is not part
of the project: install its wheel (scripts/fetch-peers.sh downloads it) and run this on an sm90 GPU.

fp8: Q, K and V become e4m3 codes with one descale per (batch, kv head) = absmax / 448, as the
caller of flash_attn_func supplies them; Q's descale is per kv head, shared by the query heads of a
GQA group (the API's shape for it is [B, H_kv]). bf16: Q, K and V rounded to bf16.
Usage: prove_fa3.py --out DIR DUMP [DUMP ...]"""
import sys

import torch

from peer_outputs import layer_tensors, prove


def fa3():
    try:
        from fa3_fwd_interface import flash_attn_func
    except ImportError as e:
        sys.exit(f"prove_fa3: FlashAttention-3's forward is not importable ({e}); install the fa3-fwd wheel (scripts/fetch-peers.sh)")
    return flash_attn_func


def bnhd(x):  # [H, N, d] -> [1, N, H, d]
    return x.permute(1, 0, 2).unsqueeze(0).contiguous()


def run_layer(attn, d, fp8):
    if d["window"]:
        raise SystemExit("prove_fa3: this forward build has local attention compiled out; the dump's layer has a window")
    q, k, v = layer_tensors(d)
    hq, hkv = q.shape[0], k.shape[0]
    kw = dict(causal=bool(d["causal"]), softmax_scale=float(d["softmax_scale"]))
    if fp8:
        # absmax / 448 in fp32, per kv head; Q's over the query heads of each group.
        qd = q.reshape(hkv, -1).abs().amax(1) / 448
        kd, vd = k.reshape(hkv, -1).abs().amax(1) / 448, v.reshape(hkv, -1).abs().amax(1) / 448
        group = hq // hkv
        codes = [(x / s.repeat_interleave(r)[:, None, None]).to(torch.float8_e4m3fn) for x, s, r in ((q, qd, group), (k, kd, 1), (v, vd, 1))]
        out = attn(*(bnhd(c) for c in codes), q_descale=qd[None].contiguous(), k_descale=kd[None].contiguous(),
                   v_descale=vd[None].contiguous(), **kw)
    else:
        out = attn(*(bnhd(x.to(torch.bfloat16)) for x in (q, k, v)), **kw)
    out = out[0] if isinstance(out, (tuple, list)) else out
    return out[0].permute(1, 0, 2).float().cpu().numpy()  # [Hq, N, d], bf16 values


def main():
    prove(__doc__, fa3, [("fa3-fp8", lambda attn, layer: run_layer(attn, layer, True), "preset=fa3-fp8", "bf16"),
                         ("fa3-bf16", lambda attn, layer: run_layer(attn, layer, False), "preset=fa3-bf16", "bf16")])


if __name__ == "__main__":
    main()
