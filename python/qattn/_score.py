"""qattn.score: run any attention function on a dump's tensors and score it as `qattn score` does."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from . import _core


# The element types a function may be handed: floating point only (an integer dtype would hand the
# kernel truncated Q/K/V, and the lab scores attention on real-valued inputs).
_NUMPY_DTYPES = ("float16", "float32", "float64")
_TORCH_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _to_numpy(out: Any, where: str) -> np.ndarray:
    """The function's output as a float32 NumPy array, without any reshaping or broadcasting."""
    if hasattr(out, "detach"):  # torch: to the host, as float32 (fp16/bf16 values are exact in float32)
        if not out.dtype.is_floating_point or out.dtype.is_complex:
            raise ValueError(f"{where}: the function returned a torch tensor of dtype {out.dtype}; expected a floating-point tensor")
        out = out.detach().float().cpu().numpy()
    arr = np.asarray(out)
    if arr.dtype.kind != "f":
        raise ValueError(f"{where}: the function returned dtype {arr.dtype}; expected a floating-point array")
    # Stored as float32 (schema qattn-outputs/1): float64 outputs are rounded once, 2^-24 relative
    # (about 144 dB), far below the error of any quantized recipe the lab scores.
    return np.ascontiguousarray(arr, dtype=np.float32)


def _check_inputs_options(tensor: Any, device: Any, dtype: Any, layout: Any) -> None:
    """tensor, device, dtype and layout checked before any work, each with one clear error."""
    if tensor not in ("numpy", "torch"):
        raise ValueError(f"tensor={tensor!r}; expected 'numpy' or 'torch'")
    if layout not in ("HND", "BHND"):
        raise ValueError(f"layout={layout!r}; expected 'HND' ([H, N, d]) or 'BHND' ([1, H, N, d])")
    if device is not None and tensor != "torch":
        raise ValueError("device is only for tensor='torch'")
    if device is not None and not isinstance(device, str):
        raise ValueError(f"device={device!r}; expected a torch device name such as 'cuda' or 'cpu'")
    allowed = _TORCH_DTYPES if tensor == "torch" else _NUMPY_DTYPES
    if dtype is not None and dtype not in allowed:
        raise ValueError(f"dtype={dtype!r}; expected one of {', '.join(allowed)} for tensor={tensor!r} (or None: float32)")


def _inputs(d: dict, tensor: str, device: Optional[str], dtype: Optional[str], layout: str):
    q, k, v = d["q"], d["k"], d["v"]
    if tensor == "numpy":
        if dtype is not None:
            q, k, v = (x.astype(dtype) for x in (q, k, v))
    else:
        import torch

        tdt = getattr(torch, dtype) if dtype else torch.float32
        q, k, v = (torch.from_numpy(x).to(device=device or "cpu", dtype=tdt) for x in (q, k, v))
    if layout == "BHND":
        q, k, v = (x[None] for x in (q, k, v))
    return q, k, v


def _variants(layer: dict) -> dict:
    """The attention variants a dump's layer has, as keyword arguments for the function (softcap,
    sinks, chunk, alibi); none for a plain layer, so that a function written for plain attention is called
    as before and one that meets a variant fails on the keyword rather than run as plain attention."""
    kw = {}
    if layer["softcap"]:
        kw["softcap"] = layer["softcap"]
    if layer["sinks"] is not None:
        kw["sinks"] = np.asarray(layer["sinks"], np.float64)
    if layer["chunk"]:
        kw["chunk"] = layer["chunk"]
    if layer["alibi"] is not None:
        kw["alibi"] = np.asarray(layer["alibi"], np.float64)
    return kw


def _fn_identity(fn: Callable[..., Any]) -> str:
    """Which function made a file: its module and qualified name, and a hash of its code, defaults
    and bound arguments (two functions under one name differ here). Values a closure captures
    are not part of it."""
    target = fn
    h = hashlib.sha256()
    while isinstance(target, functools.partial):
        h.update(repr((target.args, sorted(target.keywords.items()))).encode(errors="replace"))
        target = target.func
    name = f"{getattr(target, '__module__', None) or type(target).__module__}.{getattr(target, '__qualname__', None) or type(target).__qualname__}"
    h.update(name.encode(errors="replace"))
    code = getattr(target, "__code__", None) or getattr(getattr(target, "__call__", None), "__code__", None)
    if code is not None:
        for part in (code.co_code, repr(code.co_consts).encode(errors="replace"), repr(code.co_names).encode(errors="replace")):
            h.update(part)
    h.update(repr(getattr(target, "__defaults__", None)).encode(errors="replace"))
    return f"{name} {h.hexdigest()[:16]}"


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# Written into every outputs file qattn.score makes: what made it. A resumed call reuses a file
# only when every entry matches; `force` removes the files that carry it.
_WRITER = "qattn.score"


def _outputs_differ(path: str, kernel: str, recipe: str, identity: dict, layers: Sequence[str], context: int,
                    rows: Optional[np.ndarray]) -> Optional[str]:
    """None when an outputs file an earlier call left holds what this call would write, else what differs."""
    if not os.path.isfile(path):
        return "absent"
    try:
        f = _core.read_outputs(path)
    except ValueError:
        return "torn or not an outputs file"
    attrs = f["attrs"]
    for key, value in identity.items():
        if attrs.get(key) != value:
            return f"made with {key} {attrs.get(key)!r}, now {value!r}"
    if f["kernel"] != kernel:
        return f"made by kernel {f['kernel']!r}, now {kernel!r}"
    if f["recipe"] != recipe:
        return f"made with recipe {f['recipe']!r}, now {recipe!r}"
    if sorted(l["layer"] for l in f["layers"]) != sorted(layers):
        return "of other layers"
    for l in f["layers"]:
        if l["context"] != context:
            return "of another context"
        if (rows is None) != (l["rows"] is None) or (rows is not None and not np.array_equal(rows, l["rows"])):
            return "of other rows"
    return None


def _remove_own_outputs(folder: str) -> None:
    """What `force` removes from outputs/: the files an earlier qattn.score wrote there, nothing else."""
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if not name.endswith(".h5") or os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            mine = _core.read_outputs(path)["attrs"].get("written_by") == _WRITER
        except ValueError:
            mine = False
        if mine:
            os.remove(path)


def score(
    fn: Callable[..., Any],
    dump: str,
    *,
    layers: Optional[Sequence[Union[str, int]]] = None,
    contexts: Optional[Sequence[int]] = None,
    recipe: Optional[Union[str, "_core.Recipe"]] = None,
    output: str,
    kernel: Optional[str] = None,
    rows: Optional[int] = None,
    seed: int = 1,
    tensor: str = "numpy",
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    layout: str = "HND",
    force: bool = False,
    resume: bool = False,
    quiet: bool = True,
    progress: bool = True,
) -> list[dict]:
    """Call ``fn`` on a dump's Q/K/V and score its outputs into the report folder ``output``.

    For every layer (default: all) and context (default: the whole dump), ``fn`` is called as
    ``fn(q, k, v, causal=..., window=..., softmax_scale=...)`` with q [Hq, N, d] and k, v
    [Hkv, N, d] (``layout='BHND'`` adds a leading batch of 1) as NumPy arrays, or as torch tensors
    with ``tensor='torch'`` on ``device`` in ``dtype`` (e.g. 'float16'); window 0 means none. A layer
    with an attention variant adds its keywords: ``softcap=`` (c: c tanh(s / c) on the scaled
    scores), ``sinks=`` (one sink logit per query head, float64), ``chunk=`` (chunked attention) and
    ``alibi=`` (one ALiBi slope per query head: -slope |i - j| joins the scaled score);
    V may have a head dim of its own (dv). It must
    return the output of every query head and row, [Hq, N, dv] (or [1, Hq, N, dv]); nothing is
    broadcast or truncated. The outputs are written as qattn-outputs/1 files (kept in
    ``output/outputs/``) and scored exactly as ``qattn score`` scores them: per layer, context and
    head, the kernel against float64, the recipe's emulation against float64 and the kernel
    against the emulation. ``rows`` scores a seeded sample of that many query rows per context
    (the function still computes all). Returns the report's rows (results.jsonl).

    The kernel's outputs are the costly part: each context's file is written into
    ``output/outputs/`` as soon as it is computed, and ``resume=True`` completes an interrupted
    call without calling ``fn`` again for a context whose file is there and was made the same way:
    the same kernel name and function (module, qualified name and code; values a closure captures
    are not compared: name such kernels apart with ``kernel``), recipe, dump content (SHA-256),
    layers, context, rows, ``tensor``, ``dtype``, ``layout`` and ``device``; any other file is
    computed again, and stderr says why. ``force=True`` replaces the report and removes the outputs
    files an earlier call wrote into ``output/outputs/`` (files of yours there stay). Ctrl-C stops scoring between units. ``progress`` shows each kernel call and each scored
    unit on stderr, with an ETA; ``quiet=False`` also prints the report's summary.
    """
    rows_out, _ = _score(fn, dump, layers=layers, contexts=contexts, recipe=recipe, output=output, kernel=kernel, rows=rows, seed=seed,
                         tensor=tensor, device=device, dtype=dtype, layout=layout, force=force, resume=resume, quiet=quiet, progress=progress)
    return rows_out


def _check_types(**named: Any) -> None:
    """Each argument's type checked here, named as the caller wrote it (not as the binding calls it)."""
    for name, (value, kinds, expected) in named.items():
        if isinstance(value, bool) and bool not in kinds:  # True is an int to Python, never a count here
            raise ValueError(f"{name}={value!r}; expected {expected}")
        if not isinstance(value, kinds):
            raise ValueError(f"{name}={value!r} ({type(value).__name__}); expected {expected}")


def _check_count(name: str, value: int, low: int, high: int, expected: str) -> None:
    """An integer argument the C++ library takes as an int, checked in range before the binding sees it."""
    if not low <= int(value) <= high:
        raise ValueError(f"{name}={value}; expected {expected}")


def _check_seed(seed: Any) -> None:
    _check_types(seed=(seed, (int, np.integer), "a non-negative integer"))
    if not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed={seed}; expected an integer in 0..2^64-1")


def _score(fn, dump, *, layers, contexts, recipe, output, kernel, rows, seed, tensor, device, dtype, layout, force, resume, quiet, progress):
    """score's work; also returns the outputs files it scored (qattn.fit fits exactly those)."""
    if not callable(fn):
        raise ValueError(f"fn={fn!r}; expected an attention function fn(q, k, v, causal=, window=, softmax_scale=)")
    _check_types(dump=(dump, (str, os.PathLike), "the path of a dump (qattn-dump/1)"),
                 output=(output, (str, os.PathLike), "the path of a report folder"),
                 kernel=(kernel, (str, type(None)), "the kernel's name as a string (or None: the function's name)"),
                 force=(force, (bool,), "True or False"), resume=(resume, (bool,), "True or False"),
                 quiet=(quiet, (bool,), "True or False"), progress=(progress, (bool,), "True or False"))
    dump, output = os.fspath(dump), os.fspath(output)
    _check_seed(seed)
    if rows is not None:
        _check_types(rows=(rows, (int, np.integer), "a positive number of query rows (or None: every row)"))
        if rows <= 0:
            raise ValueError(f"rows={rows}; expected a positive number of query rows (or None: every row)")
    _check_inputs_options(tensor, device, dtype, layout)
    info = _core.open_dump(dump)
    names = [l["name"] for l in info["layers"]]
    if layers is not None and len(layers) == 0:
        raise ValueError(f"layers: empty; expected at least one of {', '.join(names)} (or None: all)")
    if contexts is not None and len(contexts) == 0:
        raise ValueError(f"contexts: empty; expected at least one token count in 1..{info['n_tokens']} (or None: the whole dump)")
    chosen = [str(x) for x in layers] if layers is not None else names
    for name in chosen:
        if name not in names:
            raise ValueError(f"layers: {dump} has no layer {name!r}; expected one of {', '.join(names)}")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"layers: {chosen} names a layer twice")
    ctxs = list(contexts) if contexts is not None else [info["n_tokens"]]
    if len(set(ctxs)) != len(ctxs):
        raise ValueError(f"contexts: {ctxs} names a context twice")
    for c in ctxs:
        if not isinstance(c, (int, np.integer)) or isinstance(c, bool) or c <= 0 or c > info["n_tokens"]:
            raise ValueError(f"contexts: {c!r}; expected token counts in 1..{info['n_tokens']} ({dump})")
    recipe_line = str(recipe) if recipe is not None else ""
    if recipe_line:
        recipe_line = str(_core.Recipe(recipe_line))  # validated before any work
    name = kernel or getattr(fn, "__name__", "kernel")
    if force and resume:  # (refused again by the claim below; here before the folder is read)
        _core.claim_report_for(output, "score", force, resume)
    config = os.path.join(output, "config.json")
    if resume and os.path.isfile(config):
        try:
            kind = json.load(open(config)).get("kind")
        except (ValueError, AttributeError):
            kind = None
        if kind != "score":
            raise ValueError(f"{output}: holds a report that qattn.score did not write (kind {kind!r}); resume=True completes only "
                             "a score report: choose another output")
    with _core.claim_report_for(output, "score", force, resume):
        keep = os.path.join(output, "outputs")
        if force:
            _remove_own_outputs(keep)
        os.makedirs(keep, exist_ok=True)
        # What made each outputs file: a resumed call reuses a file only if all of it matches.
        identity = {"written_by": _WRITER, "dataset": dump, "dataset_sha256": _file_sha256(dump), "function": _fn_identity(fn),
                    "tensor": tensor, "dtype": dtype or "float32", "layout": layout, "device": device or ("cpu" if tensor == "torch" else "numpy")}
        files = []
        calls, t0 = len(ctxs) * len(chosen), time.monotonic()
        done = 0
        for c in ctxs:
            picked = _core.sample_rows(int(c), int(rows), int(seed)) if rows is not None and rows < c else None
            path = os.path.join(keep, f"{name.replace(os.sep, '_')}-ctx{c}.h5")
            if resume:
                differs = _outputs_differ(path, name, recipe_line, identity, chosen, int(c), picked)
                if differs is None:
                    files.append(path)
                    calls -= len(chosen)
                    continue
                if differs != "absent":
                    print(f"score: {path}: {differs}: calling the function again", file=sys.stderr, flush=True)
            entries = []
            for lname in chosen:
                d = _core.load_layer(dump, lname, tokens=int(c))
                q, k, v = _inputs(d, tensor, device, dtype, layout)
                where = f"score: {name} on layer {lname}, context {c}"
                out = _to_numpy(fn(q, k, v, causal=d["causal"], window=d["window"], softmax_scale=d["softmax_scale"], **_variants(d)), where)
                done += 1
                if progress:
                    spent = time.monotonic() - t0
                    print(f"score: [{done}/{calls}] {name} on layer {lname}, context {c} ({spent:.1f} s; "
                          f"ETA of the calls {spent / done * (calls - done):.0f} s)", file=sys.stderr, flush=True)
                if layout == "BHND":
                    if out.ndim != 4 or out.shape[0] != 1:
                        raise ValueError(f"{where}: the function returned shape {out.shape}; expected [1, Hq, N, d]")
                    out = out[0]
                expected = d["q"].shape[:2] + d["v"].shape[2:]  # O has V's head dim
                if out.shape != expected:
                    raise ValueError(f"{where}: the function returned shape {tuple(out.shape)}; expected {tuple(expected)} [Hq, N, dv]")
                if not np.all(np.isfinite(out)):
                    bad = tuple(int(i) for i in np.argwhere(~np.isfinite(out))[0])
                    raise ValueError(f"{where}: output{list(bad)} is {out[bad]}; expected finite outputs")
                entry = {"layer": lname, "context": int(c)}
                if picked is not None:
                    entry["o"] = np.ascontiguousarray(out[:, picked, :])
                    entry["rows"] = picked
                else:
                    entry["o"] = out
                entries.append(entry)
            _core.write_outputs(path, name, entries, recipe=recipe_line, dtype="fp32", attrs=identity)
            files.append(path)
        return _core.score_files(dump, files, output, recipe="", force=True, quiet=quiet, progress=progress), files
