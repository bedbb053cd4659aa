#!/usr/bin/env python3
"""A user's own checkpoint through the dumper, as a user runs it: tiny random-weight checkpoints built
offline from transformers' own configurations (two layers, hidden 64), each saved with a word-level
tokenizer and dumped with `dump_qkv.py --model DIR --text FILE`; the dumper's float64 check must pass
on every layer, `qattn inspect` must load the dump, an experiment must run on it, and the end-to-end
evaluation's model attention and fp32 recipe must equal float64 attention to float32 precision. Gemma 2's soft-capped logits and gpt-oss's sink
logits, Llama 4's chunked attention, DeepSeek V3's value head dim and BLOOM's ALiBi are dumped with them
(schema 2). Architectures whose attention has a variant the lab does not
model yet are refused, naming the configuration field, never dumped as plain attention;
RoPE-free layers (SmolLM3's every fourth) are dumped with rope = "none".
Usage: test_dump_local.py QATTN_BINARY (run with the dumper's environment: .venv-dump/bin/python)."""
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QATTN = sys.argv[1]
spec = importlib.util.spec_from_file_location("qattn_models", ROOT / "python" / "qattn" / "models.py")
models = importlib.util.module_from_spec(spec)
spec.loader.exec_module(models)

import h5py  # noqa: E402

sys.path.insert(0, str(Path(QATTN).resolve().parents[1] / "python"))  # the built package beside the qattn binary
from qattn import model_eval  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_checkpoints import TINY, checkpoint, tokenizer_for  # noqa: E402
# Plain causal attention (with each family's own twist: QKV bias, q/k norm, a sliding window, fused
# QKV, post-norm, rope-free layers that the interval leaves out at two layers).
PLAIN = {"llama": {}, "qwen2": {}, "qwen3": {"head_dim": 16}, "mistral": {"sliding_window": 32}, "phi3": {}, "olmo2": {},
         "smollm3": {"num_hidden_layers": 4},
         # Gemma 3 (q/k norms, local and global layers with their own RoPE bases) and Cohere 2 (a
         # sliding layer, then a global one without RoPE).
         "gemma3_text": {"head_dim": 16, "sliding_window": 32, "layer_types": ["sliding_attention", "full_attention"]},
         "cohere2": {"sliding_window": 32, "layer_types": ["sliding_attention", "full_attention"]}}
# Layers dumped with rope = "none": SmolLM3 leaves RoPE out of every fourth layer (no_rope_layers).
ROPE_FREE = {"smollm3": [3], "llama4_text": [3], "cohere2": [1]}
# Variants the lab models, dumped with them (schema 2): Gemma 2's soft-cap, set near the tiny model's
# scores (|s| ~0.03) so that tanh bends them (the default 50 would leave them linear), and gpt-oss's
# sink logits (random, ~0.02: against scores near 0 a sink takes about 1 / (row + 2) of a row's mass).
# Llama 4's chunked attention with chunks of 32 of the 96 tokens on layers 0-2 (layer 3 global and
# RoPE-free, as its no_rope_layers interval of 4 makes it).
VARIANTS = {"gemma2": {"head_dim": 16, "attn_logit_softcapping": 0.02}, "gpt_oss": {"head_dim": 16},
            "llama4_text": {"head_dim": 16, "num_hidden_layers": 4, "attention_chunk_size": 32},
            "deepseek_v3": {"qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "q_lora_rank": 48,
                            "num_key_value_heads": 4},  # MLA expands K and V to every query head
            "bloom": {"n_head": 4, "n_layer": 2}}
# DeepSeek V3's multi-head latent attention: Q and K at 24 = 16 + 8 per head, V at 16.
V_DIMS = {"deepseek_v3": (24, 16)}
CHUNKS = {"llama4_text": [32, 32, 32, 0]}
# Variants the lab does not model yet: the field the refusal must name.
REFUSED = {"falcon": ({"alibi": True}, "alibi")}


def main():
    failures = []
    t0 = time.time()
    text, _ = models.prose_text()
    text = text[:20000]
    tok = tokenizer_for(text)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text_file = tmp / "text.txt"
        text_file.write_text(text, encoding="utf-8")
        for model_type, extra in {**PLAIN, **VARIANTS}.items():
            ckpt = checkpoint(model_type, extra, tmp / model_type, tok)
            out = tmp / f"{model_type}.h5"
            r = subprocess.run([sys.executable, str(ROOT / "datasets" / "dump" / "dump_qkv.py"), "--model", str(ckpt), "--text", str(text_file),
                                "--tokens", "96", "--layers", "all", "--out", str(out)], capture_output=True, text=True)
            layers = extra.get("num_hidden_layers", TINY["num_hidden_layers"])
            layers_ok = r.stdout.count("  ok")
            if r.returncode != 0 or layers_ok != layers:
                failures.append(f"{model_type}: dump rc {r.returncode}, {layers_ok} of {layers} layers ok\n{r.stdout}{r.stderr}")
                continue
            with h5py.File(out, "r") as f:
                rope_free = [i for i in range(layers) if f[f"layers/{i}"].attrs["rope"] == "none"]
                schema = f.attrs["schema"]
                caps = [float(f[f"layers/{i}"].attrs.get("softcap", 0.0)) for i in range(layers)]
                sinks = [f[f"layers/{i}/sinks"][()] if "sinks" in f[f"layers/{i}"] else None for i in range(layers)]
                chunks = [int(f[f"layers/{i}"].attrs.get("attention_chunk", 0)) for i in range(layers)]
                alibi = ["alibi_slopes" in f[f"layers/{i}"] for i in range(layers)]
                dims = {(f[f"layers/{i}/k"].shape[2], f[f"layers/{i}/v"].shape[2]) for i in range(layers)}
            if rope_free != ROPE_FREE.get(model_type, []):
                failures.append(f"{model_type}: layers stored as RoPE-free {rope_free}; expected {ROPE_FREE.get(model_type, [])}")
                continue
            want_cap = extra.get("attn_logit_softcapping", 0.0)
            model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32) if model_type == "gpt_oss" else None
            want_sinks = [model.model.layers[i].self_attn.sinks.detach().double().numpy() for i in range(layers)] if model else [None] * layers
            same_sinks = all((a is None and b is None) or (a is not None and b is not None and (a == b).all()) for a, b in zip(sinks, want_sinks))
            want_schema = "qattn-dump/2" if model_type in VARIANTS else "qattn-dump/1"
            want_chunks = CHUNKS.get(model_type, [0] * layers)
            want_dims = V_DIMS.get(model_type)
            if (schema != want_schema or caps != [want_cap] * layers or not same_sinks or chunks != want_chunks or (want_dims and dims != {want_dims})
                    or alibi != [model_type == "bloom"] * layers):
                failures.append(f"{model_type}: stored schema {schema}, soft-caps {caps}, sinks {sinks}, chunks {chunks}; expected {want_schema}, "
                                f"{[want_cap] * layers}, the model's sinks {want_sinks}, chunks {want_chunks}; (K, V) head dims {dims}")
                continue
            i = subprocess.run([QATTN, "inspect", str(out)], capture_output=True, text=True)
            if i.returncode != 0:
                failures.append(f"{model_type}: qattn inspect rc {i.returncode}: {i.stderr}")
                continue
            said = ("soft-capped at" in i.stdout, "a sink logit per query head" in i.stdout, "chunked attention" in i.stdout, "ALiBi" in i.stdout)
            if said != (bool(want_cap), model is not None, any(want_chunks), model_type == "bloom"):
                failures.append(f"{model_type}: qattn inspect shows (soft-cap, sinks, chunks, ALiBi) = {said}:\n{i.stdout}")
                continue
            refusal = None
            if model_type in VARIANTS:
                # A recipe through qattn eval on the variant layer; an integer softmax is refused by name.
                e = subprocess.run([QATTN, "eval", "--data", str(out), "--layer", "1", "--recipe", "q=bf16 k=bf16 v=bf16 p=bf16", "-q"],
                                   capture_output=True, text=True)
                bad = subprocess.run([QATTN, "eval", "--data", str(out), "--layer", "1", "-q", "--recipe",
                                      "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash"], capture_output=True, text=True)
                refusal = ("soft-caps its logits" if want_cap else "sink logits" if model else "adds ALiBi slopes" if model_type == "bloom"
                           else None)
                named = {"gemma2": "soft-cap 0.02", "gpt_oss": "sink logits", "llama4_text": "chunks of 32", "deepseek_v3": "V head dim 16",
                         "bloom": "ALiBi"}[model_type]  # the eval's header names the layer's variant
                if e.returncode != 0 or named not in e.stdout.splitlines()[0] or (refusal and (bad.returncode == 0 or refusal not in bad.stderr)):
                    failures.append(f"{model_type}: qattn eval rc {e.returncode}: {e.stdout}{e.stderr}; qflash rc {bad.returncode}: {bad.stderr}")
                    continue
            # An experiment over every layer: the float recipe runs on each, the integer softmax is
            # listed as not run where it cannot apply the variant.
            report = tmp / f"{model_type}-report"
            experiment = tmp / f"{model_type}.json"
            experiment.write_text(json.dumps({
                "name": model_type, "dataset": str(out), "selection": {"layers": list(range(layers)), "contexts": [96], "rows": 32},
                "seed": 1, "output": str(report),
                "recipes": {"int8 + e4m3": "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel",
                            "qflash": "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash"}}))
            run = subprocess.run([QATTN, "run", str(experiment), "-q"], capture_output=True, text=True)
            rows = (report / "results.jsonl").read_text().splitlines() if run.returncode == 0 else []
            summary = (report / "summary.md").read_text() if run.returncode == 0 else ""
            ran = sum('"int8 + e4m3"' in r for r in rows)
            if run.returncode != 0 or ran != layers * TINY["num_attention_heads"] or bool(refusal) != ("- `qflash`: the problem" in summary):
                failures.append(f"{model_type}: qattn run rc {run.returncode}, {ran} int8 + e4m3 rows: {run.stderr}\n{summary}")
                continue
            # End to end: the model's own attention and an fp32 recipe through the lab's attention
            # against float64 attention. Float32 attention on these tiny models: KL ~1e-15 (measured
            # 2e-15 on Gemma 2); 1e-10 fails on any semantic difference (a variant left out: 6e-9).
            try:
                rows = {r["recipe"]: r for r in model_eval.run({"name": model_type, "model": str(ckpt), "contexts": [64],
                                                               "recipes": {"fp32": "q=fp32 k=fp32 p=fp32 v=fp32"},
                                                               "output": str(tmp / f"{model_type}-e2e")}, quiet=True)}
                if not (rows["model"]["kl_mean"] < 1e-10 and rows["fp32"]["kl_mean"] < 1e-10):
                    failures.append(f"{model_type}: end to end, KL vs float64: model {rows['model']['kl_mean']}, fp32 {rows['fp32']['kl_mean']}")
                    continue
                e2e = f"model_eval KL {rows['fp32']['kl_mean']:.1e}"
            except model_eval.EvalError as x:
                failures.append(f"{model_type}: model_eval: {x}")
                continue
            print(f"{model_type}: {e2e}; dumped {layers} layers ({schema}, float64 check passed; RoPE-free: {rope_free}; soft-cap {want_cap}; "
                  f"sinks {'stored' if model else 'none'}; chunks {chunks}; (K, V) head dims {sorted(dims)}), qattn inspect loads it")
        for model_type, (extra, field) in REFUSED.items():
            ckpt = checkpoint(model_type, extra, tmp / model_type, tok)
            try:
                models.load_local(ckpt)
                failures.append(f"{model_type}: loaded as plain attention; expected a refusal naming {field}")
            except models.ModelError as e:
                if f"config.json: {field}:" not in str(e):
                    failures.append(f"{model_type}: refused without naming {field}: {e}")
                else:
                    print(f"{model_type}: refused: {e}")
        # The command line says the same, with nothing written.
        out = tmp / "falcon.h5"
        r = subprocess.run([sys.executable, str(ROOT / "datasets" / "dump" / "dump_qkv.py"), "--model", str(tmp / "falcon"), "--text", str(text_file),
                            "--tokens", "96", "--out", str(out)], capture_output=True, text=True)
        if r.returncode != 1 or "alibi" not in r.stderr or "ALiBi" not in r.stderr or out.exists():
            failures.append(f"falcon on the command line: rc {r.returncode}, {r.stderr}")
        r = subprocess.run([sys.executable, str(ROOT / "datasets" / "dump" / "dump_qkv.py"), "--model", str(tmp / "nothing-here"), "--tokens", "96",
                            "--out", str(out)], capture_output=True, text=True)
        if r.returncode != 1 or "expected a registry name" not in r.stderr:
            failures.append(f"a missing --model: rc {r.returncode}, {r.stderr}")
    if failures:
        print("FAIL:\n" + "\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"PASS: {len(PLAIN) + len(VARIANTS)} architectures dumped and loaded ({len(VARIANTS)} with their variants), "
          f"{len(REFUSED)} variants refused by name ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
