#!/usr/bin/env python3
"""FlashAttention-3's forward kernel (PyPI fa3-fwd 0.0.3: FA3's hopper/ forward for sm90) on every
layer of a dump, in fp8 e4m3 and in bf16, with the inputs prepared the way its API takes them; the
outputs are written as qattn-outputs/1 files for `qattn score` and `qattn fit`. The peer is not part
of the project: install its wheel (scripts/fetch-peers.sh downloads it) and run this on an sm90 GPU.

fp8: Q, K and V become e4m3 codes with one descale per (batch, kv head) = absmax / 448, as the
caller of flash_attn_func supplies them; Q's descale is per kv head, shared by the query heads of a
GQA group (the API's shape for it is [B, H_kv]). bf16: Q, K and V rounded to bf16.

Two checks of the kernel itself, for locating a difference from its preset:
  --runs R          call the kernel R times per layer and print, per query head, how many outputs
                    differ from the first call (0 everywhere: the kernel is deterministic);
  --roll-kv-heads K also run with the KV heads moved K places (Q's groups with them) and the outputs
                    moved back, written as <dump>-fa3-fp8-rollK.h5: a difference that stays with the
                    data moves with it, one that stays with a head index does not.
Usage: prove_fa3.py --out DIR [--rows N] [--runs R] [--roll-kv-heads K] DUMP [DUMP ...]   (--rows: N sampled query rows a layer kept)"""
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


def call(attn, q, k, v, fp8, kw):
    hq, hkv = q.shape[0], k.shape[0]
    if fp8:
        # absmax / 448 in fp32, per kv head; Q's over the query heads of each group. On the GPU torch
        # divides by the number 448 as a multiply by fp32(1 / 448) (the preset's /amax:mul; inferred
        # from FA3's outputs and PyTorch's source).
        qd = q.reshape(hkv, -1).abs().amax(1) / 448
        kd, vd = k.reshape(hkv, -1).abs().amax(1) / 448, v.reshape(hkv, -1).abs().amax(1) / 448
        group = hq // hkv
        codes = [(x / s.repeat_interleave(r)[:, None, None]).to(torch.float8_e4m3fn) for x, s, r in ((q, qd, group), (k, kd, 1), (v, vd, 1))]
        out = attn(*(bnhd(c) for c in codes), q_descale=qd[None].contiguous(), k_descale=kd[None].contiguous(),
                   v_descale=vd[None].contiguous(), **kw)
    else:
        out = attn(*(bnhd(x.to(torch.bfloat16)) for x in (q, k, v)), **kw)
    out = out[0] if isinstance(out, (tuple, list)) else out
    return out[0].permute(1, 0, 2).float()  # [Hq, N, d], bf16 values


def run_layer(attn, d, fp8, runs=1, roll=0):
    if d["window"]:
        raise SystemExit("prove_fa3: this forward build has local attention compiled out; the dump's layer has a window")
    q, k, v = layer_tensors(d)
    group = q.shape[0] // k.shape[0]
    if roll:
        q, k, v = torch.roll(q, roll * group, 0), torch.roll(k, roll, 0), torch.roll(v, roll, 0)
    kw = dict(causal=bool(d["causal"]), softmax_scale=float(d["softmax_scale"]))
    first = call(attn, q, k, v, fp8, kw)
    for r in range(1, runs):
        differ = (call(attn, q, k, v, fp8, kw) != first).sum(dim=(1, 2)).tolist()
        print(f"{'fp8' if fp8 else 'bf16'} layer {d['name']} roll {roll}: call {r + 1} differs from call 1 in "
              f"{sum(differ)} outputs (per query head, in the dump's order: {torch.roll(torch.tensor(differ), -roll * group).tolist()})", flush=True)
    return torch.roll(first, -roll * group, 0).cpu().numpy()


def main():
    args = sys.argv[1:]
    opts = {}
    for name in ("--runs", "--roll-kv-heads"):
        if name in args:
            i = args.index(name)
            least = 1 if name == "--runs" else 0
            if i + 1 >= len(args) or not args[i + 1].isdigit() or int(args[i + 1]) < least:
                sys.exit(f"prove_fa3: {name} takes a whole number of at least {least}, got {args[i + 1] if i + 1 < len(args) else 'nothing'}")
            opts[name] = int(args[i + 1])
            del args[i:i + 2]
    sys.argv[1:] = args
    runs, roll = opts.get("--runs", 1), opts.get("--roll-kv-heads", 0)
    kernels = [("fa3-fp8", lambda attn, layer: run_layer(attn, layer, True, runs), "preset=fa3-fp8", "bf16"),
               ("fa3-bf16", lambda attn, layer: run_layer(attn, layer, False, runs), "preset=fa3-bf16", "bf16")]
    if roll:
        kernels.append((f"fa3-fp8-roll{roll}", lambda attn, layer: run_layer(attn, layer, True, runs, roll), "preset=fa3-fp8", "bf16"))
    prove(__doc__, fa3, kernels)


if __name__ == "__main__":
    main()
