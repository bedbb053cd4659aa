#!/usr/bin/env python3
"""Dump Q, K (after RoPE) and V of a model's attention on a text into a qattn-dump/1 file (/2 with the
variants of a model that has them: soft-cap, sink logits, chunks, ALiBi, a value head dim unlike Q/K's).

The model (a registry name, a Hugging Face checkpoint directory, a GGUF file or a model id from the
Hugging Face cache) runs in transformers, on the CPU or the GPU, in float32, bfloat16 or float16. A
wrapper around transformers' attention captures, for each dumped layer, exactly the tensors the
attention consumes (Q and K after RoPE and any q/k norm, V), the softmax scale, the sliding window and
the variants, and the attention output the model itself computed in the same forward pass. Each layer
is checked and written as soon as it is captured, so host memory holds one layer's tensors beyond the
model.

Built-in check, per layer: attention recomputed in float64 from the captured tensors must match the
model's own output to the compute dtype's precision, and from the stored (rounded) tensors to within
what the storage dtype allows. The dumper fails loudly otherwise and records both numbers in the file.

Deterministic: fixed thread count, deterministic torch algorithms, one forward pass; two runs on the
same machine give identical tensors (the created_at attribute aside).
    python datasets/dump/dump_qkv.py --model DIR --text FILE --tokens N --layers all --out DUMP
    python -m qattn.dump ...   (the same, where the package is installed)
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
    """The package's model registry (models.py beside this file): imported from the package, or
    loaded by its path when the dumper runs without a built qattn (datasets/dump/dump_qkv.py)."""
    if __package__:
        from . import models

        return models
    import importlib.util

    path = Path(__file__).resolve().parent / "models.py"
    spec = importlib.util.spec_from_file_location("qattn_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_m = _registry()
MODELS, ModelError, text_config, attention_chunk = _m.MODELS, _m.ModelError, _m.text_config, _m.attention_chunk

STORAGE = {"fp16": np.float16, "fp32": np.float32}
# Float attention against float64 on the same tensors, by the dtype the model computes in. float32:
# ~1e-7 relative per operation, sums over <= 128k keys and d <= 256 stay near 1e-6, so 1e-4. bfloat16
# (8-bit significand): the kernel rounds P and the output to bf16, 2^-9 relative each, so 3e-2 (ten
# times that and more). float16 (11 bits): 8 times finer, 4e-3. A real semantic mismatch (mask, scale,
# head mapping) shows as 1e-1 and above, so each still fails it.
TOL_CAPTURED = {"fp32": 1e-4, "bf16": 3e-2, "fp16": 4e-3}
MAX_TOKENS = 131072


def die(msg):
    print(f"dump_qkv: error: {msg}", file=sys.stderr)
    sys.exit(1)


def progress(msg):
    print(f"dump_qkv: {msg}", file=sys.stderr, flush=True)


def open_model(args):
    """(tokenizer, model, provenance attrs) of --model, on --device in --compute dtype."""
    return _m.open_any(args.model, args.cache_dir, device=args.device, dtype=args.compute, random_weights=args.random_weights)


def head_selection(heads, hq, hkv):
    """(query heads, KV heads) to store for --heads (None: all). Whole GQA groups only: a group's query
    heads share one K and V, and a recipe's per-KV-head scales are taken over the whole group, so a
    part of one would be another problem. Raises ValueError naming the group otherwise."""
    if heads is None:
        return list(range(hq)), list(range(hkv))
    group = hq // hkv
    bad = [h for h in heads if not 0 <= h < hq]
    if bad:
        raise ValueError(f"query head {bad[0]} is outside 0..{hq - 1}")
    kv = sorted({h // group for h in heads})
    want = [g * group + i for g in kv for i in range(group)]
    if sorted(set(heads)) != want:
        g = next(g for g in kv if any(g * group + i not in heads for i in range(group)))
        raise ValueError(f"query heads {g * group}..{g * group + group - 1} share KV head {g} ({hq} query heads over {hkv} KV heads); "
                         f"expected whole groups, e.g. {','.join(map(str, range(g * group, g * group + group)))}")
    return want, kv


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


def capture_bloom(model, layers, sink):
    """BLOOM's attention is its own (not transformers' attention interface): hooks read Q, K, V and
    ALiBi's slopes (models.bloom_attention_inputs), and its output where it enters the dense projection."""
    captured = {}
    for idx, block in enumerate(model.transformer.h):
        attn = block.self_attention

        def before(module, args, kwargs, idx=idx):
            if idx not in layers:
                return
            q, k, v, slopes = _m.bloom_attention_inputs(module, args, kwargs)
            captured[idx] = {
                "q": to_numpy(q[0]), "k": to_numpy(k[0]), "v": to_numpy(v[0]), "scale": float(module.inv_norm_factor), "window": 0,
                "causal": True, "softcap": 0.0, "chunk": 0, "sinks": None, "no_rope": False,
                "alibi": slopes.cpu().numpy().copy(),
            }

        def at_dense(module, args, idx=idx):
            sink.passed(idx)
            if idx not in layers:
                return
            c = captured.pop(idx)
            n = args[0].shape[1]
            c["out"] = to_numpy(args[0][0].reshape(n, -1, c["q"].shape[2]).transpose(0, 1))
            sink.add(idx, c)

        attn.register_forward_pre_hook(before, with_kwargs=True)
        attn.dense.register_forward_pre_hook(at_dense)


def rel_l2(x, ref):
    return float(np.linalg.norm((x - ref).ravel()) / np.linalg.norm(ref.ravel()))


class LayerSink:
    """Checks each captured layer against float64 and writes it into the open HDF5 file at once (the
    tensors are dropped after), so a dump of many long layers needs one layer's memory."""

    def __init__(self, f, args, rows, n_layers, layers):
        self.f, self.args, self.rows, self.n_layers, self.layers = f, args, rows, n_layers, layers
        self.store = STORAGE[args.dtype]
        self.tol = TOL_CAPTURED[args.compute]
        self.checks, self.variant, self.seen = {}, False, 0
        self.t0 = time.time()

    def passed(self, idx):
        """A layer went through attention (dumped or not): progress with the forward pass's ETA."""
        self.seen += 1
        elapsed = time.time() - self.t0
        eta = elapsed / self.seen * (self.n_layers - self.seen)
        progress(f"forward: layer {idx} ({self.seen} of {self.n_layers}), {elapsed:.0f} s, about {eta:.0f} s left")

    def add(self, idx, c):
        args, rows = self.args, self.rows
        try:
            qh, kvh = head_selection(args.heads, c["q"].shape[0], c["k"].shape[0])
        except ValueError as e:
            die(f"--heads: layer {idx}: {e}")
        if args.heads is not None:  # the chosen query heads' tensors, with their KV heads'
            c = dict(c, q=c["q"][qh], k=c["k"][kvh], v=c["v"][kvh], out=c["out"][qh],
                     sinks=None if c["sinks"] is None else c["sinks"][qh], alibi=None if c["alibi"] is None else c["alibi"][qh])
        if not all(np.isfinite(c[t]).all() for t in ("q", "k", "v", "out")):
            die(f"layer {idx}: non-finite values in the captured tensors")
        for t in ("q", "k", "v"):
            if np.abs(c[t]).max() > np.finfo(self.store).max:
                die(f"layer {idx}: {t} exceeds {args.dtype}'s range")
        t0 = time.time()
        model_out = c["out"][:, rows].astype(np.float64)
        variants = dict(softcap=c["softcap"], sinks=c["sinks"], chunk=c["chunk"], alibi=c["alibi"])
        exact = attention_f64(c["q"], c["k"], c["v"], c["scale"], c["causal"], c["window"], rows, **variants)
        stored = attention_f64(*(c[t].astype(self.store) for t in ("q", "k", "v")), c["scale"], c["causal"], c["window"], rows, **variants)
        e_exact, e_stored = rel_l2(model_out, exact), rel_l2(model_out, stored)
        self.checks[idx] = (e_exact, e_stored)
        ok = e_exact <= self.tol and e_stored <= args.stored_tolerance
        print(f"layer {idx:3d}: window {c['window']:5d} scale {c['scale']:.6g}  rel L2 vs float64: captured "
              f"{e_exact:.2e} (<= {self.tol:g}), stored {args.dtype} {e_stored:.2e} (<= {args.stored_tolerance:g})  {'ok' if ok else 'FAIL'}",
              flush=True)
        if not ok:
            die(f"the float64 check failed for layer {idx}: the dumped tensors do not reproduce the model's attention")
        g = self.f.create_group(f"layers/{idx}")
        for t in ("q", "k", "v"):
            g.create_dataset(t, data=c[t].astype(self.store))
        g.attrs["causal"] = np.int64(1 if c["causal"] else 0)
        g.attrs["sliding_window"] = np.int64(c["window"])
        g.attrs["softmax_scale"] = np.float64(c["scale"])
        g.attrs["rope"] = "none" if c["no_rope"] else "applied"  # SmolLM3, Llama 4: RoPE-free layers
        if c["softcap"]:
            g.attrs["softcap"] = np.float64(c["softcap"])
        if c["chunk"]:
            g.attrs["attention_chunk"] = np.int64(c["chunk"])
        if c["sinks"] is not None:
            g.create_dataset("sinks", data=c["sinks"].astype(np.float64))
        if c["alibi"] is not None:
            g.create_dataset("alibi_slopes", data=c["alibi"].astype(np.float64))
        g.attrs["check_rel_l2_captured"] = np.float64(e_exact)
        g.attrs["check_rel_l2_stored"] = np.float64(e_stored)
        self.f.flush()
        self.variant |= bool(c["softcap"] or c["chunk"] or c["sinks"] is not None or c["alibi"] is not None or c["v"].shape[2] != c["k"].shape[2])
        progress(f"layer {idx} checked and written in {time.time() - t0:.1f} s ({len(self.checks)} of {len(self.layers)} dumped layers)")


def to_numpy(t):
    import torch

    return t.detach().to(torch.float32).cpu().numpy().copy()


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="dump_qkv", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True,
                    help=f"a registry name ({', '.join(sorted(MODELS))}), a Hugging Face checkpoint directory, a .gguf file, "
                         "or a model id in the Hugging Face cache (org/name)")
    ap.add_argument("--text", default=None, help="a UTF-8 text file, or a .jsonl / .parquet file with --text-column "
                                                 "(default: Python's documentation topics)")
    ap.add_argument("--text-column", default=None, help="the column (JSON Lines key, Parquet column) holding the text; its rows are joined")
    ap.add_argument("--tokens", type=int, required=True, help=f"context length N (at most {MAX_TOKENS})")
    ap.add_argument("--layers", default="all", help="comma-separated layer indices, or 'all'")
    ap.add_argument("--heads", default="all", help="comma-separated query heads (whole GQA groups, stored with their KV heads), or 'all'")
    ap.add_argument("--dtype", choices=sorted(STORAGE), default="fp16", help="storage dtype")
    ap.add_argument("--compute", choices=sorted(TOL_CAPTURED), default="fp32", help="the dtype the model's weights and compute use")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the model runs")
    ap.add_argument("--random-weights", type=int, default=None, metavar="SEED",
                    help="build the model from its config.json with random weights (seeded); for shape and scale runs, not for findings")
    ap.add_argument("--out", required=True)
    ap.add_argument("--check-rows", type=int, default=0, help="query rows per layer for the float64 check (0 = all)")
    # fp16 rounds Q, K and V by up to 2^-11 relative; a logit s moves by ~|s| 2^-11 and the output by
    # about as much: 1e-2 covers logits up to ~20 (SmolLM2 measured 1.5e-4..4e-4, Gemma 3 see README).
    ap.add_argument("--stored-tolerance", type=float, default=1e-2,
                    help="largest relative L2 allowed between float64 attention on the stored tensors and the model's output")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-dir", default=str(Path(__file__).resolve().parents[2] / "datasets" / "generated" / "cache"))
    ap.add_argument("--seed", type=int, default=0, help="seed of the check's row sample")
    args = ap.parse_args(argv)
    if not 1 <= args.tokens <= MAX_TOKENS:
        ap.error(f"--tokens {args.tokens}: expected 1 to {MAX_TOKENS}")
    if args.text_column and not args.text:
        ap.error("--text-column names a column of --text's file; give --text")
    try:
        args.heads = None if args.heads == "all" else [int(x) for x in args.heads.split(",")]
    except ValueError:
        ap.error(f"--heads {args.heads!r}: expected comma-separated query head indices or 'all'")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda":
        # Deterministic cuBLAS (torch.use_deterministic_algorithms refuses it otherwise).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    import transformers

    import h5py
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()

    try:
        text, text_source = _m.text_file(args.text, args.text_column) if args.text else _m.prose_text()
        tok, model, provenance = open_model(args)
    except ModelError as e:
        die(str(e))
    progress(f"loaded {provenance['model']} on {args.device} in {args.compute} ({time.time() - t0:.0f} s)")
    cfg = text_config(model)
    n_layers = cfg.num_hidden_layers
    try:
        layers = list(range(n_layers)) if args.layers == "all" else [int(x) for x in args.layers.split(",")]
    except ValueError:
        die(f"--layers {args.layers!r}: expected comma-separated layer indices or 'all'")
    for layer in layers:
        if not 0 <= layer < n_layers:
            die(f"--layers: layer {layer} is outside 0..{n_layers - 1} of {provenance['model']}")
    hq = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", None)
    if args.heads is not None and hq:  # checked again on each layer's tensors
        try:
            head_selection(args.heads, hq, getattr(cfg, "num_key_value_heads", None) or hq)
        except ValueError as e:
            die(f"--heads: {e}")
    max_ctx = getattr(cfg, "max_position_embeddings", None)
    if max_ctx and args.tokens > max_ctx:
        die(f"--tokens {args.tokens} exceeds the model's context {max_ctx}")

    ids = tok(text, return_tensors="pt").input_ids[0]
    if ids.numel() < args.tokens:
        die(f"the text has only {ids.numel()} tokens; asked for {args.tokens}")
    ids = ids[: args.tokens].unsqueeze(0)
    n = args.tokens
    rng = np.random.default_rng(args.seed)
    rows = np.arange(n) if args.check_rows in (0, n) else np.sort(rng.choice(n, size=min(args.check_rows, n), replace=False))

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp.{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            sink = LayerSink(f, args, rows, n_layers, layers)
            t_forward = forward(model, cfg, ids, layers, sink, torch, sdpa_attention_forward, ALL_ATTENTION_FUNCTIONS)
            missing = [l for l in layers if l not in sink.checks]
            if missing:
                die(f"layers {missing}: the forward pass did not go through the captured attention")
            versions = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
                        "numpy": np.__version__, "h5py": h5py.__version__}
            try:
                versions["gguf"] = importlib.metadata.version("gguf")  # GGUF weights only; absent where none are read
            except importlib.metadata.PackageNotFoundError:
                pass
            a = f.attrs
            # Schema 2 adds the variants (soft-cap, sinks, chunks, ALiBi, V's own head dim); without them, schema 1.
            a["schema"] = "qattn-dump/2" if sink.variant else "qattn-dump/1"
            for key, value in provenance.items():
                a[key] = value
            a["text_source"] = text_source
            if args.heads is not None:
                a["query_heads"] = ",".join(map(str, sorted(set(args.heads))))  # the model's indices of the stored query heads
            a["n_tokens"] = np.int64(n)
            a["created_by"] = "datasets/dump/dump_qkv.py"
            a["created_at"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            a["command_line"] = " ".join(shlex.quote(x) for x in (sys.argv if argv is None else ["dump_qkv", *argv]))
            a["tool_versions"] = json.dumps(versions, sort_keys=True)
            a["torch_threads"] = np.int64(args.threads)
            if args.device != "cpu" or args.compute != "fp32":
                a["compute"] = f"{args.compute} on {args.device}" + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else "")
            a["check"] = (f"float64 attention on {len(rows)} query rows per layer vs the model's own attention output; "
                          f"relative L2 limits {TOL_CAPTURED[args.compute]:g} (captured tensors, {args.compute} compute) and "
                          f"{args.stored_tolerance:g} (stored {args.dtype})")
            f.create_dataset("tokens", data=ids[0].numpy().astype(np.int32))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    memory = f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if args.device == "cuda" else ""
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {len(layers)} layers, {n} tokens, "
          f"forward {t_forward:.0f} s, total {time.time() - t0:.0f} s, peak host memory {_m.peak_rss_gib():.1f} GiB{memory}")
    return 0


def forward(model, cfg, ids, layers, sink, torch, sdpa_attention_forward, attention_functions):
    """One forward pass of the decoder stack with every layer's attention captured into `sink`;
    returns its seconds."""
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
                attention_mask = torch.full((n, n), float("-inf"), dtype=query.dtype, device=query.device).triu(1)[None, None]
            elif attention_mask.dtype == torch.bool:  # SDPA's mask says where to attend; eager adds its mask
                attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device).masked_fill(~attention_mask, float("-inf"))
            out, weights = eager(module, query, key, value, attention_mask, dropout=dropout,
                                 scaling=scaling if scaling is not None else module.scaling, **kwargs)
        else:
            out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                                  scaling=scaling, **kwargs)
        idx = module.layer_idx
        sink.passed(idx)
        if idx in layers:
            window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None) or 0
            sink.add(idx, {
                "q": to_numpy(query[0]), "k": to_numpy(key[0]), "v": to_numpy(value[0]),
                "out": to_numpy(out[0].transpose(0, 1)),  # [Hq, N, d]
                "scale": float(scaling if scaling is not None else module.scaling),
                "window": int(window),
                "causal": bool(getattr(module, "is_causal", True)),
                "softcap": softcap,
                "chunk": attention_chunk(cfg, idx),
                "alibi": None,
                "sinks": None if sinks is None else sinks.detach().to(torch.float64).cpu().numpy().copy(),
                "no_rope": _m.rope_free(cfg, idx),
            })
        return out, weights

    attention_functions["sdpa"] = capture
    if own_eager is not None:
        modeling.eager_attention_forward = capture
    if getattr(cfg, "model_type", "") == "bloom":
        capture_bloom(model, layers, sink)
    t0 = time.time()
    # The decoder stack alone: the LM head's logits (N x vocab; 34 GB for Gemma 3 at 32k) are not needed.
    with torch.no_grad():
        model.get_decoder()(input_ids=ids.to(model.device), use_cache=False)
    return time.time() - t0


if __name__ == "__main__":
    sys.exit(main())
