#!/usr/bin/env python3
"""A user's own checkpoint through the dumper, as a user runs it: tiny random-weight checkpoints built
offline from transformers' own configurations (two layers, hidden 64), each saved with a word-level
tokenizer and dumped with `dump_qkv.py --model DIR --text FILE`; the dumper's float64 check must pass
on every layer and `qattn inspect` must load the dump. Architectures whose attention has a variant the
lab does not model yet are refused, naming the configuration field, never dumped as plain attention;
RoPE-free layers (SmolLM3's every fourth) are dumped with rope = "none".
Usage: test_dump_local.py QATTN_BINARY (run with the dumper's environment: .venv-dump/bin/python)."""
import collections
import importlib.util
import re
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
import torch  # noqa: E402
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast  # noqa: E402

VOCAB = 256
TINY = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# Plain causal attention (with each family's own twist: QKV bias, q/k norm, a sliding window, fused
# QKV, post-norm, rope-free layers that the interval leaves out at two layers).
PLAIN = {"llama": {}, "qwen2": {}, "qwen3": {"head_dim": 16}, "mistral": {"sliding_window": 32}, "phi3": {}, "olmo2": {},
         "smollm3": {"num_hidden_layers": 4}}
# Layers dumped with rope = "none": SmolLM3 leaves RoPE out of every fourth layer (no_rope_layers).
ROPE_FREE = {"smollm3": [3]}
# Variants the lab does not model yet: the field the refusal must name.
REFUSED = {"gemma2": ({"head_dim": 16}, "attn_logit_softcapping"), "gpt_oss": ({"head_dim": 16}, "model_type"),
           "deepseek_v3": ({}, "v_head_dim"), "bloom": ({}, "model_type"), "llama4_text": ({"head_dim": 16}, "attention_chunk_size")}


def tokenizer_for(text):
    words = re.findall(r"\w+|[^\w\s]", text)
    vocab = {"[UNK]": 0}
    for w, _ in collections.Counter(words).most_common(VOCAB - 1):
        vocab[w] = len(vocab)
    tok = Tokenizer(tok_models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def checkpoint(model_type, extra, where, tok):
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, **{**TINY, **extra})
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return where


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
        for model_type, extra in PLAIN.items():
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
            if rope_free != ROPE_FREE.get(model_type, []):
                failures.append(f"{model_type}: layers stored as RoPE-free {rope_free}; expected {ROPE_FREE.get(model_type, [])}")
                continue
            i = subprocess.run([QATTN, "inspect", str(out)], capture_output=True, text=True)
            if i.returncode != 0:
                failures.append(f"{model_type}: qattn inspect rc {i.returncode}: {i.stderr}")
                continue
            print(f"{model_type}: dumped {layers} layers (float64 check passed; RoPE-free: {rope_free}), qattn inspect loads it")
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
        out = tmp / "gemma2.h5"
        r = subprocess.run([sys.executable, str(ROOT / "datasets" / "dump" / "dump_qkv.py"), "--model", str(tmp / "gemma2"), "--text", str(text_file),
                            "--tokens", "96", "--out", str(out)], capture_output=True, text=True)
        if r.returncode != 1 or "attn_logit_softcapping" not in r.stderr or out.exists():
            failures.append(f"gemma2 on the command line: rc {r.returncode}, {r.stderr}")
        r = subprocess.run([sys.executable, str(ROOT / "datasets" / "dump" / "dump_qkv.py"), "--model", str(tmp / "nothing-here"), "--tokens", "96",
                            "--out", str(out)], capture_output=True, text=True)
        if r.returncode != 1 or "expected a registry name" not in r.stderr:
            failures.append(f"a missing --model: rc {r.returncode}, {r.stderr}")
    if failures:
        print("FAIL:\n" + "\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"PASS: {len(PLAIN)} architectures dumped and loaded, {len(REFUSED)} variants refused by name ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
