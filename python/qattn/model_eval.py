"""What a recipe does to a real model: perplexity and next-token KL with the lab computing attention.

The model (transformers, float32, weights from the GGUF files the dumper uses) reads windows of a
fixed English text. In every layer the experiment names, attention is computed by the lab for a
recipe (the emulator, or the GPU kernels with ``backend: gpu``); the other layers, and the baseline,
run the float64 reference. Everything else is the model's own computation. Per recipe and context it
reports perplexity over the evaluated positions, its change against the float64-attention model and
against the model's own attention (its SDPA in float32), the mean and 99th-percentile next-token
KL(P_float64 || P_recipe), top-1 agreement and KL by position bucket.

Run it (in the dumper's environment, which has torch and transformers):

    .venv-dump/bin/python -m qattn.model_eval EXPERIMENT.json [--force] [--quiet]

Work is saved per (context, window, recipe) unit under OUTPUT/units/, so an interrupted run resumes
without repeating or losing a unit; the report (config.json, results.jsonl/.csv, summary.md,
figures/) is rebuilt from the units at the end.

Under an MPI launcher (``mpirun -n R python -m qattn.model_eval ...``, with mpi4py installed) the
windows are split over the ranks by cost, each rank writing its own units; rank 0 writes the report
once every rank is done. Units are files, so a resumed run may use any number of ranks.
"""
import argparse
import csv
import hashlib
import io
import json
import math
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import _core
from . import _model_experiment as _exp
from . import models as _models
from ._model_experiment import REFERENCE, ExperimentError

SCHEMA = "qattn-model-eval/1"
BASELINE = "float64"  # every layer's attention by the float64 reference
OWN = "model"         # the model's own attention (transformers' SDPA, float32)


class EvalError(ValueError):
    """An input the evaluation cannot run; the message names the file, key and what was expected."""


# ---- the model, its text and its attention ----

_LOADED = {}


def _source_dir():
    """The source tree this package was built from (for the cache folder and the git commit)."""
    env = os.environ.get("QATTN_SOURCE_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "python" / "qattn" / "models.py").exists():
            return parent
    return Path.cwd()


def _cache_dir():
    return _source_dir() / "datasets" / "generated" / "cache"


def _converted_dir(name, gguf):
    """The cache folder for what one GGUF file converts to (config, token ids, float32 weights),
    keyed by the file's identity and the converting library's version: a changed file or a newer
    transformers converts anew. Converting is most of a run's start (config 3 s, tokenizer 6 s,
    weights 12 s for SmolLM2 on a 2-core machine); reading the converted files takes about 1 s."""
    import transformers

    st = gguf.stat()
    ident = f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}|transformers {transformers.__version__}"
    return _cache_dir() / "converted" / f"{name}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def _publish(write, final):
    """Writes a folder through `write(tmp)` and renames it into place, so that a folder that exists
    is complete; when another process published it first, its copy (the same content) stays."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        write(tmp)
        os.replace(tmp, final)
    except OSError:
        if not (final.is_dir() and any(final.iterdir())):
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def model_facts(name, path="<experiment>", weights=None, text=None, cache=True):
    """Config, tokenizer and token ids of the text, without the weights (fast): for validation.
    `weights` and `text`: files given instead of the package's GGUF and the default text.
    `cache`: read (and write) the converted config and ids in the cache folder; False converts
    from the GGUF file every time."""
    key = ("facts", name, weights, text, cache)
    if key in _LOADED:
        return _LOADED[key]
    form = _form(name, path)
    from transformers import AutoConfig, AutoTokenizer

    if form != "registry" and form != "gguf":
        _LOADED[key] = _local_facts(_checkpoint_dir(name, path), path, weights, text)
        return _LOADED[key]
    if form == "gguf":
        if weights:
            raise EvalError(f"{path}: $.weights: the model is a GGUF file already ({name}); $.weights replaces a registry model's")
        weights = name

    try:
        gguf = Path(weights) if weights else _models.gguf_path(name, _cache_dir())
        body, text_source = _models.text_file(text) if text else _models.prose_text()
    except _models.ModelError as e:
        raise EvalError(f"{path}: {'$.text' if text else '$.model'}: {e}") from None
    folder = None
    if cache and gguf.is_file():
        folder = _converted_dir(_cache_name(name), gguf) / f"facts-{hashlib.sha256(body.encode()).hexdigest()[:16]}"
    if folder is not None and folder.is_dir():
        full_cfg = AutoConfig.from_pretrained(str(folder))
        ids = np.load(folder / "ids.npy")
        bos = json.loads((folder / "tokens.json").read_text())["bos"]
    else:
        try:
            full_cfg = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        except Exception as e:  # transformers raises many kinds for a file that is not a model it reads
            raise EvalError(f"{path}: $.weights: {gguf}: not a GGUF model transformers can load ({type(e).__name__}: {e})") from None
        ids = np.asarray(tok(body).input_ids, dtype=np.int64)
        bos = tok.bos_token_id
        if folder is not None:
            def write(tmp):
                full_cfg.save_pretrained(str(tmp))
                np.save(tmp / "ids.npy", ids)
                (tmp / "tokens.json").write_text(json.dumps({"bos": bos, "count": int(ids.size)}) + "\n")
            _publish(write, folder)
    cfg = full_cfg.get_text_config() if hasattr(full_cfg, "get_text_config") else full_cfg
    facts = {"config": cfg, "gguf": gguf, "ids": ids, "text_source": text_source, "bos": bos}
    _LOADED[key] = facts
    return facts


def _form(name, path="<experiment>"):
    """What $.model names (models.model_form), a checkpoint only with its config.json."""
    form = _models.model_form(name)
    if form is None or (form == "checkpoint" and not (Path(name) / "config.json").is_file()):
        raise EvalError(f"{path}: $.model: {name!r}; expected one of {', '.join(sorted(_models.MODELS))}, a Hugging Face checkpoint "
                        "directory (config.json, safetensors or bin weights, tokenizer), a .gguf file or a model id (org/name) in the "
                        "Hugging Face cache")
    return form


def _checkpoint_dir(name, path="<experiment>"):
    """The directory a checkpoint or model id is read from (a model id: its snapshot in the cache)."""
    if _form(name, path) == "checkpoint":
        return name
    try:
        return str(_models.resolve_model_id(name))
    except _models.ModelError as e:
        raise EvalError(f"{path}: $.model: {e}") from None


def _cache_name(name):
    """A registry name, or a GGUF file's stem: the converted cache's folder prefix."""
    return name if name in _models.MODELS else _slug(Path(name).stem)


def _local_facts(directory, path, weights, text):
    """model_facts of a checkpoint directory: its config and tokenizer as they stand (no cache)."""
    from transformers import AutoConfig, AutoTokenizer

    if weights:
        raise EvalError(f"{path}: $.weights: a GGUF file replaces a registry model's weights; the checkpoint {directory} has its own")
    try:
        full_cfg = AutoConfig.from_pretrained(directory)
        cfg = full_cfg.get_text_config() if hasattr(full_cfg, "get_text_config") else full_cfg
        variant = _models.attention_variant(cfg)
        if variant:
            raise EvalError(f"{path}: $.model: {directory}/config.json: {variant[0]}: the model {variant[1]}, which the lab does not model yet")
        tok = AutoTokenizer.from_pretrained(directory)
        body, text_source = _models.text_file(text) if text else _models.prose_text()
    except _models.ModelError as e:
        raise EvalError(f"{path}: $.text: {e}") from None
    except (OSError, ValueError) as e:
        if isinstance(e, EvalError):
            raise
        raise EvalError(f"{path}: $.model: {directory}: transformers cannot read it: {str(e).splitlines()[0]}") from None
    ids = np.asarray(tok(body).input_ids, dtype=np.int64)
    return {"config": cfg, "gguf": None, "checkpoint": Path(directory), "ids": ids, "text_source": text_source, "bos": tok.bos_token_id}


def _model_identity(facts):
    """What the evaluated model was read from, as a resumed report must match it: each file of a
    checkpoint directory (name, size, modification time), or the GGUF file's, as the converted cache
    keys it."""
    files = sorted(p for p in facts["checkpoint"].iterdir() if p.is_file()) if facts["gguf"] is None else [facts["gguf"]]
    return [f"{p.resolve()}|{p.stat().st_size}|{p.stat().st_mtime_ns}" for p in files]


def _title(name):
    """The model's name in reports: the registry's title, the GGUF file's or the checkpoint directory's
    name, or the model id."""
    form = _form(name)
    if form == "registry":
        return _models.MODELS[name]["title"]
    if form == "gguf":
        return f"{Path(name).stem} (GGUF {name})"
    return f"{name} (Hugging Face cache)" if form == "id" else f"{Path(name).name} (checkpoint {name})"


def _model(name, weights=None, cache=True, precision="float32", device="cpu"):
    """The model in float32 (or converted to float64), eval mode, with the lab's attention registered,
    on `device`. `cache`: as for model_facts (the converted weights, written with save_pretrained, read
    back bit for bit)."""
    key = ("model", name, weights, cache, precision, device)
    if device != "cpu" and key not in _LOADED:
        import copy

        on_host = ("model", name, weights, cache, precision, "cpu")
        kept = on_host in _LOADED  # loaded for another run: copied; else moved, so host memory is freed
        m = _model(name, weights, cache, precision)
        if not kept:
            del _LOADED[on_host]
        _LOADED[key] = (copy.deepcopy(m) if kept else m).to(device)
    if precision == "float64" and key not in _LOADED:
        import copy

        import torch

        # A copy: Module.to converts in place, and the float32 model stays loaded for other runs.
        _LOADED[key] = copy.deepcopy(_model(name, weights, cache)).to(dtype=torch.float64)
    if key not in _LOADED:
        import torch
        from transformers import AttentionInterface, AutoModelForCausalLM

        AttentionInterface.register("qattn", _lab_attention)
        form = _form(name)
        if form in ("checkpoint", "id"):
            try:
                _, m, _ = _models.load_local(_checkpoint_dir(name))
            except _models.ModelError as e:
                raise EvalError(f"$.model: {e}") from None
            _LOADED[key] = m
            return m
        if form == "gguf":
            weights = name
        gguf = Path(weights) if weights else _models.gguf_path(name, _cache_dir())
        folder = _converted_dir(_cache_name(name), gguf) / "model" if cache else None
        if folder is not None and folder.is_dir():
            m = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="sdpa")
            m.eval()
        else:
            _, m, _ = _models.load_model(name if form == "registry" else None, _cache_dir(), gguf=weights)
            if folder is not None:
                _publish(lambda tmp: m.save_pretrained(str(tmp)), folder)
        _LOADED[key] = m
    return _LOADED[key]


def layer_kinds(cfg):
    """'global' or 'sliding' per layer, from the config (Gemma 3 lists them; Llama has none)."""
    n = cfg.num_hidden_layers
    types = getattr(cfg, "layer_types", None)
    if not types:
        return ["sliding" if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", False) else "global"] * n
    return ["sliding" if t == "sliding_attention" else "global" for t in types]


def windows_of(ids, bos, context, count):
    """The evaluated windows: each starts with BOS (when the tokenizer has one) and continues the text."""
    if bos is not None and len(ids) and ids[0] == bos:
        body = ids[1:]
        step = context - 1
        return [np.concatenate([[bos], body[w * step:(w + 1) * step]]) for w in range(count)], 1 + count * step
    return [ids[w * context:(w + 1) * context] for w in range(count)], count * context


class _Plan:
    """What computes attention in each layer during one forward pass."""

    def __init__(self, recipes, layers, backend, threads):
        self.recipes = recipes  # a recipe's stored form (_model_experiment.line_for reads a layer's line)
        self.perturb = bool(recipes.get("perturb"))  # the noise floor's pass: Q, K, V moved by about an ulp
        self.layers = layers    # set of layer indices, or None for all
        self.backend = backend
        self.threads = threads
        self.seconds = 0.0
        self.calls = 0  # attention layers the lab computed in this pass
        self.undefined = None


_PLAN = None


class _UndefinedOutput(Exception):
    pass


def _lab_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    import torch

    plan = _PLAN
    if plan is None:
        raise RuntimeError("qattn.model_eval: the lab's attention was called outside an evaluation")
    if attention_mask is not None or query.shape[0] != 1:
        raise EvalError("qattn.model_eval: the model passed an attention mask or a batch; one unpadded sequence is expected")
    layer = int(module.layer_idx)
    plan.calls += 1
    window = int(kwargs.get("sliding_window") or getattr(module, "sliding_window", None) or 0)
    sinks = getattr(module, "sinks", None)  # gpt-oss: a learned sink logit per query head
    kw = dict(causal=bool(getattr(module, "is_causal", True)), window=window,
              softmax_scale=float(scaling if scaling is not None else module.scaling),
              softcap=float(kwargs.get("softcap") or 0.0),  # Gemma 2's attn_logit_softcapping
              sinks=None if sinks is None else sinks.detach().to(torch.float64).tolist(),
              chunk=_models.attention_chunk(_models.text_config(module), layer) if hasattr(module, "config") else 0,
              alibi=kwargs.get("alibi"))  # BLOOM's slopes, from _alibi_hooks
    # [H, N, d] float32 views (DLPack, any strides); a model on the GPU hands them over to the host
    q, k, v = (x[0].detach().cpu() for x in (query, key, value))
    if query.dtype != torch.float32 or plan.perturb:
        q, k, v = (_lab_input(x, (layer, which) if plan.perturb else None) for which, x in enumerate((q, k, v)))
    line = _exp.line_for(plan.recipes, layer, window) if plan.layers is None or layer in plan.layers else REFERENCE
    t0 = time.perf_counter()
    if line == REFERENCE:
        out = _core.reference(q, k, v, **kw)["out"]
    elif plan.backend == "gpu":
        out = _core.gpu_run(q, k, v, line, **kw)["out"]
    else:
        out = _core.emulate(q, k, v, line, threads=plan.threads, **kw)["out"]
    plan.seconds += time.perf_counter() - t0
    if not np.all(np.isfinite(out)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(out))[0])
        raise _UndefinedOutput(f"layer {layer}: the recipe's attention output [head {bad[0]}, row {bad[1]}] is not defined "
                               f"(every P of the row rounded to zero, or an overflow)")
    o = torch.from_numpy(np.ascontiguousarray(out, dtype=np.float64 if query.dtype == torch.float64 else np.float32))
    return o.to(query.device).transpose(0, 1).unsqueeze(0), None


# The noise floor's perturbation: each element of Q, K and V times (1 + u 2^-23), u uniform in [-1, 1],
# rounded to float32: about one float32 ulp, the size of the differences another CPU's summation
# order leaves in the tensors reaching attention (a 576-term float32 dot product in another order
# moves by a few ulps at most).
PERTURB_SCALE = 2.0 ** -23


def _lab_input(x, perturb):
    """A tensor as the lab's attention takes it: float32 (a float64 model's Q, K, V rounded, as a kernel
    receives them), perturbed by about an ulp for the noise floor's pass (perturb: (layer, 0/1/2 for
    Q/K/V), the perturbation's seed)."""
    a = x.double().numpy()
    if perturb is not None:
        u = np.random.default_rng([20261207, *perturb]).uniform(-1.0, 1.0, a.shape)
        a = a * (1.0 + PERTURB_SCALE * u)
    return np.ascontiguousarray(a, dtype=np.float32)


def _forward_kept(model, ids, plan, path):
    """hidden_states, kept in `path` (an .npz; an earlier pass's file is read instead of recomputing)."""
    import torch

    if path.exists():
        with np.load(path) as z:
            return torch.from_numpy(z["h"]), float(z["attention_seconds"])
    h, seconds = hidden_states(model, ids, plan)
    buf = io.BytesIO()
    np.savez(buf, h=h.numpy(), attention_seconds=np.float64(seconds))
    _atomic_write(path, buf.getvalue(), "wb")
    return h, seconds


def _own_attention(model):
    """The model's own attention implementation: SDPA, or its eager attention where SDPA would drop
    a variant (Gemma 2's soft-cap, which transformers' SDPA path ignores) or has no path (gpt-oss)."""
    cfg = _models.text_config(model)
    sinks = any(hasattr(m, "sinks") for m in model.modules())
    return "eager" if getattr(cfg, "attn_logit_softcapping", None) or sinks else "sdpa"


def _alibi_attention(model):
    """BLOOM's attention modules: its own (outside transformers' attention interface), ALiBi inside."""
    return [m for m in model.modules() if type(m).__name__ == "BloomAttention"]


def _alibi_hooks(model):
    """The lab's attention in BLOOM's place: a hook before each attention module reads Q, K, V from its
    fused projection and the ALiBi slopes from the bias it adds (models.bloom_attention_inputs), and a
    hook on its output projection replaces what enters it (the
    heads' merged output) with the lab's. The module's own scores still run, their result unused; the
    softmax is unchanged by BLOOM's bias being slope * j rather than the lab's -slope |i - j| (the
    two differ by a constant per row). Returns the hooks' handles."""
    handles = []
    for attn in _alibi_attention(model):
        if getattr(attn, "pretraining_tp", 1) > 1 and getattr(attn, "slow_but_exact", False):
            raise EvalError("BLOOM with pretraining_tp > 1 and slow_but_exact: its output projection is applied in slices, "
                            "which the lab's attention cannot enter; expected slow_but_exact false")

        def before(module, args, kwargs):
            q, k, v, slopes = _models.bloom_attention_inputs(module, args, kwargs)
            module._qattn_inputs = (q, k, v, slopes.tolist())

        def at_dense(dense, args, module=attn):
            q, k, v, slopes = module._qattn_inputs
            del module._qattn_inputs
            out, _ = _lab_attention(module, q, k, v, None, scaling=module.inv_norm_factor, alibi=slopes)
            return (out.reshape(1, q.shape[2], -1).to(args[0].dtype),)

        handles.append(attn.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(attn.dense.register_forward_pre_hook(at_dense))
    return handles


def hidden_states(model, ids, plan):
    """The decoder's last hidden states [N, hidden] (after the final norm) with attention by `plan`
    (None: the model's own attention, _own_attention). Returns (hidden, attention seconds)."""
    import torch

    global _PLAN
    alibi = bool(_alibi_attention(model))
    handles = []
    if not alibi:
        model.set_attn_implementation(_own_attention(model) if plan is None else "qattn")
    elif plan is not None:
        handles = _alibi_hooks(model)
    _PLAN = plan
    try:
        with torch.no_grad():
            decoder = model.base_model if alibi else model.get_decoder()  # BLOOM's get_decoder is the whole model
            out = decoder(input_ids=torch.from_numpy(np.asarray(ids))[None].to(model.device), use_cache=False)
    finally:
        _PLAN = None
        for h in handles:
            h.remove()
    if plan is not None and plan.calls == 0:
        # A model whose attention is its own module, outside transformers' attention interface (and
        # not BLOOM's, which the hooks enter): every recipe would silently equal the model's own.
        raise EvalError(f"{type(model).__name__}: the model's attention does not go through transformers' attention interface, "
                        "so the lab cannot compute it; refused rather than reported as the model's own")
    return out.last_hidden_state[0].cpu(), (plan.seconds if plan is not None else 0.0)


def logits(model, h):
    """The model's own head on hidden states [n, hidden] (on the host): float32 logits (softcapped if
    the model does), on the host."""
    import torch

    with torch.no_grad():
        z = model.get_output_embeddings()(h.to(model.device))
        cap = getattr(_models.text_config(model), "final_logit_softcapping", None)
        if cap:
            z = torch.tanh(z / cap) * cap
    return z.cpu()


def compare_positions(model, h_ref, hidden, ids):
    """Per evaluated position t (predicting token t+1), for each model in `hidden` (name -> hidden
    states): its NLL and the baseline's, KL(P_ref || P) and whether their top-1 tokens agree. The
    baseline's log-probabilities are formed once per chunk for all of them; log-softmax in float64
    so that a KL of 1e-9 is still resolved."""
    import torch

    targets = torch.from_numpy(np.asarray(ids[1:]))
    n = targets.numel()
    vocab = model.get_output_embeddings().weight.shape[0]
    chunk = max(1, (1 << 25) // vocab)  # a few hundred MB of float64 log-probabilities at a time
    out = {name: {"nll": np.empty(n), "ref_nll": np.empty(n), "kl": np.empty(n), "top1": np.empty(n, dtype=np.uint8)}
           for name in hidden}
    with torch.no_grad():
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            lr = torch.log_softmax(logits(model, h_ref[s:e]).double(), dim=-1)
            pr, top_r = lr.exp(), lr.argmax(dim=-1)
            t = targets[s:e, None]
            ref_nll = (-lr.gather(1, t)[:, 0]).numpy()
            for name, h in hidden.items():
                lp = lr if h is h_ref else torch.log_softmax(logits(model, h[s:e]).double(), dim=-1)
                o = out[name]
                o["ref_nll"][s:e] = ref_nll
                o["nll"][s:e] = (-lp.gather(1, t)[:, 0]).numpy()
                o["kl"][s:e] = (pr * (lr - lp)).sum(dim=-1).numpy()
                o["top1"][s:e] = (top_r == lp.argmax(dim=-1)).numpy()
    return out


# ---- units, resumption and the report folder ----

def _slug(name):
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:40] or "recipe"
    return f"{s}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _atomic_write(path, data, mode="w"):
    """The report folder's atomic write (the one `qattn run` and `qattn score` use)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _core.write_atomic(str(path), data.encode() if isinstance(data, str) else bytes(data))


def _save_unit(path, arrays, info):
    buf = io.BytesIO()
    np.savez(buf, info=np.array(json.dumps(info, sort_keys=True)), **arrays)
    _atomic_write(path, buf.getvalue(), "wb")


def _load_unit(path):
    with np.load(path) as z:
        info = json.loads(str(z["info"]))
        return {k: z[k] for k in z.files if k != "info"}, info


def _versions():
    import importlib.metadata as md

    v = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "gguf", "numpy"):
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            v[pkg] = "absent"
    return v


def validate(e, path="<experiment>"):
    """Everything that can be checked before the weights load: the model, contexts against the model
    and the text, layers, and (backend gpu) that a GPU kernel covers every recipe on every layer kind."""
    facts = model_facts(e["model"], path, e.get("weights"), e.get("text"))
    cfg = facts["config"]
    max_ctx = getattr(cfg, "max_position_embeddings", None)
    title = _title(e["model"])
    for i, c in enumerate(e["contexts"]):
        if max_ctx and c > max_ctx:
            raise EvalError(f"{path}: $.contexts[{i}]: {c} tokens; {title} supports at most {max_ctx}")
        _, need = windows_of(facts["ids"], facts["bos"], c, e["windows"][i])
        if need > len(facts["ids"]):
            raise EvalError(f"{path}: $.contexts[{i}]: {e['windows'][i]} window(s) of {c} tokens need {need} tokens; "
                            f"the text has {len(facts['ids'])} for {title}")
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        causal_lm = MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)]
    except KeyError:  # a configuration transformers maps elsewhere: the first forward pass checks instead
        causal_lm = None
    if causal_lm is not None and not getattr(causal_lm, "_supports_attention_backend", False) and getattr(cfg, "model_type", "") != "bloom":
        raise EvalError(f"{path}: $.model: {title}: {causal_lm.__name__}'s attention does not go through transformers' attention interface "
                        "(Falcon and MPT compute their own; BLOOM's alone the lab enters, by hooks), so the lab cannot compute it; "
                        "refused before any work")
    n_layers = cfg.num_hidden_layers
    if e["layers"] != "all":
        for i, layer in enumerate(e["layers"]):
            if layer >= n_layers:
                raise EvalError(f"{path}: $.layers[{i}]: {layer}; {title} has layers 0..{n_layers - 1}")
    for name, r in e["recipes"].items():
        where = f"{path}: $.recipes[{json.dumps(name)}]"
        if "layer_list" in r and len(r["layer_list"]) != n_layers:
            raise EvalError(f"{where}: {len(r['layer_list'])} recipes; a list gives one per layer and {title} has {n_layers}")
        for layer in map(int, r.get("layer_map", {})):
            if layer >= n_layers:
                raise EvalError(f"{where}.{layer}: {title} has layers 0..{n_layers - 1}")
    if e.get("device", "cpu") == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise EvalError(f"{path}: $.device: 'cuda', but torch sees no GPU here (torch {torch.__version__}); expected 'cpu'")
    if e["backend"] == "gpu":
        if not _core.gpu_available():
            raise EvalError(f"{path}: $.backend: 'gpu', but this qattn was built without GPU kernels; "
                            "configure with -DQATTN_GPU=CUDA (or use backend 'emulate')")
        kinds = layer_kinds(cfg)
        chosen = range(n_layers) if e["layers"] == "all" else e["layers"]
        hq, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
        d = getattr(cfg, "head_dim", None) or cfg.hidden_size // hq
        rng = np.random.default_rng(0)
        for name, r in e["recipes"].items():
            for kind, line in sorted({(kinds[i], _exp.line_for(r, i, kinds[i] == "sliding")) for i in chosen}):
                if line == REFERENCE:
                    continue
                window = getattr(cfg, "sliding_window", 0) if kind == "sliding" else 0
                for c in e["contexts"]:
                    q = rng.standard_normal((hq, c, d)).astype(np.float32)
                    kv = rng.standard_normal((hkv, c, d)).astype(np.float32)
                    why = _core.gpu_not_covered(q, kv, kv, line, causal=True, window=window, softmax_scale=d ** -0.5,
                                                **_variant_probe(cfg, hq))
                    if why:
                        raise EvalError(f"{path}: $.recipes[{json.dumps(name)}]: no GPU kernel runs {line!r} on the {kind} layers "
                                        f"at {c} tokens: {why}")
    return facts


def _variant_probe(cfg, hq):
    """The attention variant a model's layers hand the lab (soft-cap, gpt-oss's sinks, BLOOM's ALiBi
    slopes), with placeholder values: enough for a coverage question asked before any layer runs."""
    model_type = getattr(cfg, "model_type", "")
    return {"softcap": float(getattr(cfg, "attn_logit_softcapping", None) or 0.0),
            "sinks": [0.0] * hq if model_type == "gpt_oss" else None,
            "alibi": [0.0] * hq if model_type == "bloom" else None}


def _configs(e):
    """(name, recipe's stored form or None for the model's own attention) in evaluation order; with
    $.noise_floor each recipe's perturbed pass follows it."""
    ref = {kind: REFERENCE for kind in _exp.KINDS}
    configs = [(BASELINE, ref)] + ([(OWN, None)] if e.get("model_attention", True) else [])
    for name, recipe in e["recipes"].items():
        configs.append((name, recipe))
        if e.get("noise_floor"):
            configs.append((name + _exp.PERTURBED, {**recipe, "perturb": True}))
    return configs


class _Ranks:
    """The processes of a run: one, or MPI_COMM_WORLD's when an MPI launcher started this one."""

    LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK")

    def __init__(self):
        self.comm, self.rank, self.size, self.local_rank = None, 0, 1, 0
        if not any(v in os.environ for v in self.LAUNCHER_VARS):
            return
        try:
            from mpi4py import MPI
        except ImportError:
            raise EvalError("an MPI launcher started this process but mpi4py is not installed in this Python "
                            f"({sys.executable}); install it (pip install mpi4py) or run without mpirun") from None
        self.mpi, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.local_rank = self.comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()  # among this node's ranks

    def agree(self, err):
        """Every rank's outcome of a step: returns when all succeeded; else the lowest failing rank
        raises its error and the others raise EvalError saying which rank failed."""
        if self.comm is None:
            if err is not None:
                raise err
            return
        lowest = self.comm.allreduce(self.rank if err is not None else self.size, op=self.mpi.MIN)
        if lowest == self.size:
            return
        if lowest == self.rank:
            raise err
        raise _OtherRankFailed(f"rank {self.rank} of {self.size}: stopped because rank {lowest} failed")

    def on_rank0(self, work):
        err, out = None, None
        if self.rank == 0:
            try:
                out = work()
            except Exception as e:  # noqa: BLE001 - every rank learns of it, rank 0 raises it
                err = e
        self.agree(err)
        return out


class _OtherRankFailed(Exception):
    """Another rank failed and said why; this one exits without repeating it."""


def _weight(context):
    """A window's expected cost per pass: the model's share grows linearly with the context,
    attention's quadratically."""
    return context + context * context / 4096.0


def run(experiment, *, force=False, quiet=False, path=None, command_line=None):
    """Run (or resume) an evaluation. `experiment`: a file path or a dict (the experiment file's
    contents). Returns the report's rows (results.jsonl); under mpirun, rank 0 returns them and the
    other ranks an empty list."""
    import torch

    ranks = _Ranks()
    e = facts = err = None
    try:  # every rank checks the experiment; one rank reports a mistake in it
        if isinstance(experiment, (str, os.PathLike)):
            path = str(experiment)
            e = _exp.load(path)
        else:
            path = path or "<experiment>"
            e = _exp.parse(experiment, path)
        facts = validate(e, path)
    except Exception as x:  # noqa: BLE001 - raised again by agree()
        err = x
    ranks.agree(err)
    out = Path(e["output"])
    config_path = out / "config.json"
    held = []  # rank 0's claim on the folder, for the whole run

    def prepare():  # rank 0, while the others wait
        if out.exists() and not out.is_dir():
            raise EvalError(f"{out}: is a file; expected a folder for the report (the experiment's output)")
        written = None
        if config_path.exists():
            try:
                written = json.loads(config_path.read_text())
            except json.JSONDecodeError:
                written = None
        ours = isinstance(written, dict) and written.get("schema") == SCHEMA
        if out.exists() and not ours and any(p.name not in (".lock", ".qattn-report") for p in out.iterdir()):
            raise EvalError(f"{out}: the folder exists and was not written by qattn.model_eval; choose another output")
        changed = ours and written.get("experiment") != e
        if changed and not force:
            diff = sorted(k for k in set(e) | set(written.get("experiment", {})) if e.get(k) != written.get("experiment", {}).get(k))
            raise EvalError(f"{out}: written by a different experiment (changed: {', '.join(diff)}); pass --force to start it over")
        # The same experiment on other weights (a checkpoint saved again, another GGUF file at the
        # same path) must not reuse the units the old weights made.
        if ours and not changed and written.get("provenance", {}).get("model_identity") != _model_identity(facts):
            if not force:
                raise EvalError(f"{out}: written from other model files than {e['model']} holds now (sizes or times differ); "
                                "pass --force to start it over")
            changed = True
        # The same claim as `qattn run` and `qattn score`: the lock first, then (with --force or a
        # changed experiment) only the report's own files are removed; an evaluation always resumes.
        try:
            replace = ours and (force or changed)
            held.append(_core.claim_report_for(str(out), "model_eval", force=replace, resume=not replace))
        except ValueError as x:
            raise EvalError(str(x)) from None

    ranks.on_rank0(prepare)
    try:
        return _run_locked(e, facts, out, config_path, ranks, quiet, command_line, torch)
    finally:
        for claim in held:
            claim.__exit__(None, None, None)


def _device(e, ranks):
    """Where this rank's model runs: the CPU, or the GPU of its node its local rank picks."""
    if e.get("device", "cpu") == "cpu":
        return "cpu"
    import torch

    return f"cuda:{ranks.local_rank % torch.cuda.device_count()}"


def _run_locked(e, facts, out, config_path, ranks, quiet, command_line, torch):
    torch.set_num_threads(e["threads"])
    # Deterministic cuBLAS needs a fixed workspace, set before CUDA starts (torch refuses otherwise).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    cfg = facts["config"]
    provenance = {
        "model": _title(e["model"]),
        "weights": (f"the GGUF file {e['weights']}, given by the experiment" if e.get("weights") else
                    _models.MODELS[e["model"]]["weights"] if e["model"] in _models.MODELS else
                    f"the GGUF file {e['model']}, dequantized to float32" if facts["gguf"] else
                    f"the checkpoint directory {facts['checkpoint']}"),
        **({"gguf_file": f"{facts['gguf'].name} (sha256 {_models.sha256_file(facts['gguf'])})"} if facts["gguf"] else
           {"config_sha256": _models.config_sha256(facts["checkpoint"])}),
        "model_identity": _model_identity(facts),
        "text_source": facts["text_source"], "text_tokens": int(len(facts["ids"])),
        "layers": int(cfg.num_hidden_layers), "layer_kinds": layer_kinds(cfg),
        "git_commit": _core.git_commit(str(_source_dir())), "versions": _versions(), "threads": e["threads"],
        "command_line": command_line or "qattn.model_eval.run(...)",
        "created_at": _core.now_utc(),
    }
    if e.get("device", "cpu") == "cuda":
        provenance["model_device"] = f"cuda ({torch.cuda.get_device_name(_device(e, ranks))})"

    def write_config():
        if not config_path.exists():
            _atomic_write(config_path, json.dumps({"schema": SCHEMA, "experiment": e, "provenance": provenance}, indent=2) + "\n")

    ranks.on_rank0(write_config)
    model = None
    configs = _configs(e)
    layers = None if e["layers"] == "all" else set(e["layers"])
    # The plan, the same on every rank: each window with the configurations it still lacks; every
    # rank reads the folder before any writes to it (the agree below is the barrier).
    items = []
    for c, count in zip(e["contexts"], e["windows"]):
        wins, _ = windows_of(facts["ids"], facts["bos"], c, count)
        for w, ids in enumerate(wins):
            udir = out / "units" / f"c{c}" / f"w{w}"
            items.append((c, w, ids, udir, [(n, r) for n, r in configs if not (udir / f"{_slug(n)}.npz").exists()]))
    ranks.agree(None)
    # A window's cost: its pending passes plus the float64 reference pass it needs first.
    owners = _core.cost_shares([_weight(c) * (len(p) + 1) if p else 0.0 for c, _, _, _, p in items], ranks.size)
    mine = [it for it, o in zip(items, owners) if o == ranks.rank]
    # Progress over the passes this rank runs (those already in the report are not counted).
    progress = _core.Progress(sum(_weight(c) * len(p) for c, _, _, _, p in mine), sum(len(p) for *_, p in mine),
                              quiet or ranks.rank != 0)
    err = None
    try:
        for c, w, ids, udir, pending in mine:
            if not pending:
                continue
            if model is None:
                model = _model(e["model"], e.get("weights"), precision=e.get("precision", "float32"), device=_device(e, ranks))
            info0 = {"context": c, "window": w, "tokens_sha256": hashlib.sha256(np.asarray(ids).tobytes()).hexdigest()}
            # Forward passes first, each kept on disk until the window's metrics are written, so
            # an interruption loses at most the pass under way.
            t0 = time.perf_counter()
            ref_plan = _Plan({k: REFERENCE for k in _exp.KINDS}, None, "emulate", e["threads"])
            h_ref, ref_attention = _forward_kept(model, ids, ref_plan, udir / "float64.hidden")
            ref_seconds = time.perf_counter() - t0
            hidden, infos = {}, {}
            for name, recipes in pending:
                t0 = time.perf_counter()
                info = dict(info0, recipe=name, failed=None, attention_seconds=0.0)
                try:
                    if name == BASELINE:  # its pass ran above (every window needs it)
                        h, info["attention_seconds"] = h_ref, ref_attention
                        t0 -= ref_seconds
                    else:
                        plan = None if recipes is None else _Plan(recipes, layers, e["backend"], e["threads"])
                        h, info["attention_seconds"] = _forward_kept(model, ids, plan, udir / f"{_slug(name)}.hidden")
                    hidden[name] = h
                except _UndefinedOutput as x:
                    info["failed"] = str(x)
                info["forward_seconds"] = time.perf_counter() - t0
                infos[name] = info
                progress.step(f"context {c}, window {w}, {name}: {info['forward_seconds']:.1f} s", _weight(c))
            t0 = time.perf_counter()
            metrics = compare_positions(model, h_ref, hidden, ids)
            share = (time.perf_counter() - t0) / max(1, len(hidden))  # the shared pass, split evenly
            for name, _ in pending:
                infos[name]["metrics_seconds"] = share if name in metrics else 0.0
                _save_unit(udir / f"{_slug(name)}.npz", metrics.get(name, {}), infos[name])
            for name, _ in pending:
                (udir / f"{_slug(name)}.hidden").unlink(missing_ok=True)
            (udir / "float64.hidden").unlink(missing_ok=True)
            if not quiet:
                who = f"rank {ranks.rank} of {ranks.size}: " if ranks.size > 1 else ""
                print(f"{who}context {c}, window {w}: metrics of {len(hidden)} models in {share * len(hidden):.1f} s",
                      file=sys.stderr, flush=True)
    except Exception as x:  # noqa: BLE001 - raised again by agree(), after every rank stopped
        err = x
    ranks.agree(err)
    rows = ranks.on_rank0(lambda: _report(e, out, _configs(e), provenance))
    return rows if rows is not None else []


# ---- the report ----

def _recipe_columns(recipes):
    """The CSV's recipe_global and recipe_sliding: the lines, the model's own attention, or (a recipe per
    layer) its description in both."""
    if recipes is None:
        return {"recipe_global": "sdpa float32", "recipe_sliding": "sdpa float32"}
    if "global" in recipes:
        return {"recipe_global": recipes["global"], "recipe_sliding": recipes["sliding"]}
    return {"recipe_global": _exp.describe(recipes), "recipe_sliding": _exp.describe(recipes)}


def _row(e, name, recipes, c, units, own):
    failed = [u[1]["failed"] for u in units if u[1]["failed"]]
    seconds = sum(u[1]["forward_seconds"] + u[1]["metrics_seconds"] for u in units)
    attention = sum(u[1]["attention_seconds"] for u in units)
    row = {"recipe": name, "context": c, "windows": len(units), "backend": e["backend"] if recipes else "model",
           **_recipe_columns(recipes),
           "seconds": round(seconds, 3), "attention_seconds": round(attention, 3)}
    if failed:
        row.update(failed=failed[0], positions=None, ppl=None, ppl_float64=None, ppl_model=None, dppl_vs_float64=None,
                   dppl_vs_float64_pct=None, dppl_vs_model=None, kl_mean=None, kl_p99=None, top1_agree=None, kl_by_bucket=None)
        return row
    cat = lambda key, us: np.concatenate([u[0][key] for u in us])  # noqa: E731
    nll, kl, top1 = cat("nll", units), cat("kl", units), cat("top1", units)
    ppl = math.exp(nll.mean())
    ppl_f64 = math.exp(cat("ref_nll", units).mean())
    ppl_own = math.exp(cat("nll", own).mean()) if own and not any(u[1]["failed"] for u in own) else None
    positions = np.concatenate([np.arange(len(u[0]["nll"])) for u in units])
    buckets = []
    for i, start in enumerate(e["buckets"]):
        end = e["buckets"][i + 1] if i + 1 < len(e["buckets"]) else c
        sel = (positions >= start) & (positions < end)
        if start >= c - 1 or not sel.any():
            break
        buckets.append({"start": start, "end": min(end, c - 1), "positions": int(sel.sum()), "kl_mean": float(kl[sel].mean()),
                        "dnll_mean": float((nll[sel] - cat("ref_nll", units)[sel]).mean())})
    row.update(failed=None, positions=int(nll.size), ppl=ppl, ppl_float64=ppl_f64, ppl_model=ppl_own,
               dppl_vs_float64=ppl - ppl_f64, dppl_vs_float64_pct=100.0 * (ppl / ppl_f64 - 1.0),
               dppl_vs_model=(ppl - ppl_own) if ppl_own is not None else None,
               kl_mean=float(kl.mean()), kl_p99=float(np.quantile(kl, 0.99)), top1_agree=float(top1.mean()), kl_by_bucket=buckets)
    return row


def _write_csv(path, header, rows):
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(header)
    wr.writerows(rows)
    _atomic_write(path, buf.getvalue())


def _save_png(fig, path):
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    _atomic_write(path, buf.getvalue(), "wb")


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def _report(e, out, configs, provenance):
    rows = []
    for c, count in zip(e["contexts"], e["windows"]):
        loaded = {name: [_load_unit(out / "units" / f"c{c}" / f"w{w}" / f"{_slug(name)}.npz") for w in range(count)]
                  for name, _ in configs}
        for name, recipes in configs:
            rows.append(_row(e, name, recipes, c, loaded[name], loaded.get(OWN)))
    noise = bool(e.get("noise_floor"))
    if noise:
        rows = _with_noise(e, rows)
    _atomic_write(out / "results.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    cols = ["recipe", "context", "windows", "positions", "backend", "ppl", "ppl_float64", "ppl_model", "dppl_vs_float64",
            "dppl_vs_float64_pct", "dppl_vs_model", "kl_mean", "kl_p99", "top1_agree", "seconds", "attention_seconds", "failed",
            "recipe_global", "recipe_sliding"] + (["noise_dppl_pct", "noise_kl_mean"] if noise else [])
    _write_csv(out / "results.csv", cols, [["" if r[k] is None else r[k] for k in cols] for r in rows])
    # Figure data: KL and NLL change by position bucket; perplexity change against context.
    _write_csv(out / "figures" / "kl_by_position.csv",
               ["recipe", "context", "bucket_start", "bucket_end", "positions", "kl_mean", "dnll_mean"],
               [[r["recipe"], r["context"], b["start"], b["end"], b["positions"], b["kl_mean"], b["dnll_mean"]]
                for r in rows for b in r["kl_by_bucket"] or []])
    _write_csv(out / "figures" / "ppl_vs_context.csv", ["recipe", "context", "ppl", "dppl_vs_float64_pct", "kl_mean"],
               [[r["recipe"], r["context"], r["ppl"], r["dppl_vs_float64_pct"], r["kl_mean"]] for r in rows if r["ppl"] is not None])
    _figures(out, rows, provenance["model"])
    lines = [f"# {e['name']}: {provenance['model']}, attention by the lab ({e['backend']}) in "
             f"{'every layer' if e['layers'] == 'all' else 'layers ' + ', '.join(map(str, e['layers']))}", "",
             f"Weights: {provenance.get('gguf_file') or provenance['weights'] + ', config.json sha256 ' + provenance['config_sha256']}. Text: {provenance['text_source']}; windows per context: "
             f"{', '.join(f'{c}: {w}' for c, w in zip(e['contexts'], e['windows']))}, each starting with BOS. "
             "PPL over every evaluated position; KL(P_float64 || P) per next-token distribution."
             + (f" The model's own computation ran on the GPU, {provenance['model_device']}." if provenance.get("model_device") else ""), ""]
    for c in e["contexts"]:
        lines += [f"## context {c}", "",
                  "| recipe | PPL | vs float64 | % | vs model | KL mean | KL p99 | top-1 agree | KL last bucket | time s (attention) |"
                  + (" noise: % / KL |" if noise else ""),
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if noise else "")]
        for r in rows:
            if r["context"] != c:
                continue
            if r["failed"]:
                lines.append(f"| {r['recipe']} | failed: {r['failed']} | | | | | | | | {r['seconds']:.0f} |")
                continue
            last = r["kl_by_bucket"][-1] if r["kl_by_bucket"] else None
            lines.append(f"| {r['recipe']} | {r['ppl']:.4f} | {r['dppl_vs_float64']:+.4f} | {r['dppl_vs_float64_pct']:+.2f} | "
                         f"{_fmt(r['dppl_vs_model'], '+.4f')} | {r['kl_mean']:.2e} | {r['kl_p99']:.2e} | {r['top1_agree']:.4f} | "
                         f"{_fmt(last and last['kl_mean'], '.2e')} ({last['start'] if last else '-'}+) | "
                         f"{r['seconds']:.0f} ({r['attention_seconds']:.0f}) |"
                         + (f" {_fmt(r['noise_dppl_pct'], '.2f')} / {_fmt(r['noise_kl_mean'], '.1e')} |" if noise else ""))
        lines.append("")
        if noise:
            lines += [_ties(e, [r for r in rows if r["context"] == c]), ""]
    lines += ["Recipes:", ""] + [f"- {n}: {_exp.describe(r)}" for n, r in e["recipes"].items()] + [""]
    _atomic_write(out / "summary.md", "\n".join(lines))
    return rows


def _with_noise(e, rows):
    """Each recipe's row with its noise floor (the perturbed pass's distance from it, in PPL % and KL),
    and without the perturbed rows themselves."""
    twins = {(r["recipe"][: -len(_exp.PERTURBED)], r["context"]): r for r in rows if r["recipe"].endswith(_exp.PERTURBED)}
    kept = []
    for r in rows:
        if r["recipe"].endswith(_exp.PERTURBED):
            continue
        t = twins.get((r["recipe"], r["context"]))
        ok = t is not None and not t["failed"] and not r["failed"]
        r["noise_dppl_pct"] = abs(t["dppl_vs_float64_pct"] - r["dppl_vs_float64_pct"]) if ok else None
        r["noise_kl_mean"] = abs(t["kl_mean"] - r["kl_mean"]) if ok else None
        kept.append(r)
    return kept


def _ties(e, rows):
    """The summary's line on which recipes the noise floor cannot order: two recipes whose PPL changes
    (or mean KLs) differ by no more than their noises together are not ranked by that measure."""
    ranked = [r for r in rows if r["recipe"] in e["recipes"] and r["noise_dppl_pct"] is not None]

    def ties(key, noise):
        pairs = [f"{a['recipe']} ~ {b['recipe']}" for i, a in enumerate(ranked) for b in ranked[i + 1:]
                 if abs(a[key] - b[key]) <= a[noise] + b[noise]]
        return "; ".join(pairs) if pairs else "none"

    return ("Noise floor: each recipe's pass repeated with Q, K and V moved by about one float32 ulp (one sample: an estimate, "
            f"not a bound). Not ranked against each other by PPL, their changes within their noises: {ties('dppl_vs_float64_pct', 'noise_dppl_pct')}. "
            f"By mean KL: {ties('kl_mean', 'noise_kl_mean')}.")


def _figures(out, rows, model):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("qattn.model_eval: matplotlib is not installed; figures/ holds the CSV data only", file=sys.stderr)
        return
    names = list(dict.fromkeys(r["recipe"] for r in rows if r["recipe"] != BASELINE))
    fig, ax = plt.subplots(figsize=(7, 4))
    for n in names:
        pts = [(r["context"], r["dppl_vs_float64_pct"]) for r in rows if r["recipe"] == n and r["ppl"] is not None]
        if pts:
            ax.plot(*zip(*sorted(pts)), marker="o", label=n)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("perplexity change vs float64 attention (%)")
    ax.set_title(f"{model}: every evaluated position, windows pooled")
    ax.axhline(0, color="k", lw=0.5)
    ax.legend(fontsize=7)
    _save_png(fig, out / "figures" / "ppl_vs_context.png")
    contexts = sorted({r["context"] for r in rows})
    fig, axes = plt.subplots(1, len(contexts), figsize=(5 * len(contexts), 4), squeeze=False)
    for ax, c in zip(axes[0], contexts):
        for n in names:
            r = next((r for r in rows if r["recipe"] == n and r["context"] == c), None)
            if r and r["kl_by_bucket"]:
                ax.plot([(b["start"] + b["end"]) / 2 for b in r["kl_by_bucket"]], [max(b["kl_mean"], 1e-12) for b in r["kl_by_bucket"]],
                        marker="o", label=n)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{model}, context {c}")
        ax.set_xlabel("position (bucket middle)")
        ax.set_ylabel("mean KL(P_float64 || P)")
    axes[0][0].legend(fontsize=7)
    _save_png(fig, out / "figures" / "kl_by_position.png")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qattn.model_eval", description=__doc__.split("\n")[0])
    ap.add_argument("experiment", help="the experiment JSON file")
    ap.add_argument("--force", action="store_true", help="start over in a folder an earlier (or different) experiment wrote")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        rows = run(a.experiment, force=a.force, quiet=a.quiet,
                   command_line=" ".join(shlex.quote(x) for x in [sys.executable, "-m", "qattn.model_eval", *sys.argv[1:]]))
    except _OtherRankFailed:  # that rank printed its error
        return 2
    except (ExperimentError, EvalError, ValueError) as err:
        print(f"qattn.model_eval: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a folder it cannot create or write (read-only, full disk)
        print(f"qattn.model_eval: error: {err.filename or a.experiment}: {err.strerror}", file=sys.stderr)
        return 2
    if _Ranks().rank != 0:  # rank 0 prints the summary
        return 0
    out = _exp.load(a.experiment)["output"]
    if not a.quiet:
        print(f"qattn.model_eval: {len(rows)} rows in {out}/ ({time.time() - t0:.0f} s)", file=sys.stderr)
    print(Path(out, "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
