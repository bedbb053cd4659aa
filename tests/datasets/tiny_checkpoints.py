"""Tiny random-weight checkpoints built offline from transformers' own configurations (two layers,
hidden 64) with a word-level tokenizer trained on a text: what the dumper's and the end-to-end
evaluation's tests feed them as a user's own checkpoint directory."""
import importlib.util
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

_spec = importlib.util.spec_from_file_location("shaped_checkpoint", Path(__file__).resolve().parents[2] / "datasets" / "dump" / "shaped_checkpoint.py")
shaped_checkpoint = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shaped_checkpoint)

VOCAB = 256
TINY = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tokenizer_for(text):
    return shaped_checkpoint.word_tokenizer(text, VOCAB)


def checkpoint(model_type, extra, where, tok):
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, **{**TINY, **extra})
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return where


def hub_cache(ckpt, hub, repo_id, rev):
    """A Hugging Face cache folder `hub` holding the checkpoint as model `repo_id` at revision `rev`
    (what huggingface_hub writes: models--ORG--NAME/snapshots/REV and refs/main), for offline tests."""
    root = hub / ("models--" + repo_id.replace("/", "--"))
    snap = root / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in ckpt.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(rev)
    return hub
