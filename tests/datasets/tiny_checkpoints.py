"""Tiny random-weight checkpoints built offline from transformers' own configurations (two layers,
hidden 64) with a word-level tokenizer trained on a text: what the dumper's and the end-to-end
evaluation's tests feed them as a user's own checkpoint directory."""
import collections
import re

import torch
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

VOCAB = 256
TINY = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)


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
