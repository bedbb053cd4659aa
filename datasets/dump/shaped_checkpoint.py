#!/usr/bin/env python3
"""A checkpoint directory shaped like a large model (config.json from transformers' own configuration
class, and a word-level tokenizer trained on a text), with no weights: the dumper builds the weights
where it runs (`dump_qkv.py --model DIR --random-weights SEED`), so a scale run needs nothing large
to travel. Random weights make shapes, times and memory real, not findings.
    shaped_checkpoint.py SHAPE OUT_DIR TEXT_FILE     SHAPE: one of SHAPES below
"""
import collections
import re
import sys
from pathlib import Path

# Shapes from the models' published configurations (the fields that set attention and memory).
SHAPES = {
    # Llama 3.1 8B: 32 layers, 32 query / 8 KV heads, d 128, hidden 4096.
    "llama3-8b": ("llama", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                intermediate_size=14336, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
                                rms_norm_eps=1e-5, tie_word_embeddings=False)),
    # DeepSeek-V2-Lite: multi-head latent attention (Q/K head dim 128 + 64 RoPE = 192, V 128, KV rank 512),
    # 27 layers, 16 heads, 64 routed experts of which 6 a token, the first layer dense.
    "deepseek-v2-lite": ("deepseek_v2", dict(hidden_size=2048, num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16,
                                             kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                                             intermediate_size=10944, moe_intermediate_size=1408, n_routed_experts=64, n_shared_experts=2,
                                             num_experts_per_tok=6, first_k_dense_replace=1, vocab_size=102400,
                                             max_position_embeddings=163840, rope_theta=10000.0, rms_norm_eps=1e-6)),
}


def word_tokenizer(text, vocab_size):
    """A word-level tokenizer of the text's vocab_size - 1 most frequent words (and [UNK])."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = re.findall(r"\w+|[^\w\s]", text)
    vocab = {"[UNK]": 0}
    for w, _ in collections.Counter(words).most_common(vocab_size - 1):
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def shaped(shape, where, text):
    from transformers import AutoConfig

    model_type, fields = SHAPES[shape]
    cfg = AutoConfig.for_model(model_type, **fields)
    Path(where).mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(where)
    word_tokenizer(text, 4096).save_pretrained(where)
    return where


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        print(f"usage: shaped_checkpoint.py SHAPE OUT_DIR TEXT_FILE (SHAPE: {', '.join(SHAPES)})", file=sys.stderr)
        return 2
    shaped(sys.argv[1], sys.argv[2], Path(sys.argv[3]).read_text(encoding="utf-8"))
    print(f"wrote {sys.argv[2]}: {sys.argv[1]}'s configuration and a word-level tokenizer, no weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
