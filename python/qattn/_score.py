"""qattn.score: run any attention function on a dump's tensors and score it as `qattn score` does."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from . import _core


def _to_numpy(out: Any, where: str) -> np.ndarray:
    """The function's output as a float32 NumPy array, without any reshaping or broadcasting."""
    if hasattr(out, "detach"):  # torch: to the host, as float32 (fp16/bf16 values are exact in float32)
        out = out.detach().float().cpu().numpy()
    arr = np.asarray(out)
    if arr.dtype.kind != "f":
        raise ValueError(f"{where}: the function returned dtype {arr.dtype}; expected a floating-point array")
    # Stored as float32 (schema qattn-outputs/1): float64 outputs are rounded once, 2^-24 relative
    # (about 144 dB), far below the error of any quantized recipe the lab scores.
    return np.ascontiguousarray(arr, dtype=np.float32)


def _inputs(d: dict, tensor: str, device: Optional[str], dtype: Optional[str], layout: str):
    if layout not in ("HND", "BHND"):
        raise ValueError(f"layout={layout!r}; expected 'HND' ([H, N, d]) or 'BHND' ([1, H, N, d])")
    q, k, v = d["q"], d["k"], d["v"]
    if tensor == "numpy":
        if device is not None:
            raise ValueError("device is only for tensor='torch'")
        if dtype is not None:
            q, k, v = (x.astype(dtype) for x in (q, k, v))
    elif tensor == "torch":
        import torch

        tdt = getattr(torch, dtype) if dtype else torch.float32
        q, k, v = (torch.from_numpy(x).to(device=device or "cpu", dtype=tdt) for x in (q, k, v))
    else:
        raise ValueError(f"tensor={tensor!r}; expected 'numpy' or 'torch'")
    if layout == "BHND":
        q, k, v = (x[None] for x in (q, k, v))
    return q, k, v


def _outputs_match(path: str, kernel: str, recipe: str, dump: str, layers: Sequence[str], context: int, rows: Optional[np.ndarray]) -> bool:
    """Whether an outputs file an interrupted call left holds what this call would write."""
    if not os.path.isfile(path):
        return False
    try:
        f = _core.read_outputs(path)
    except ValueError:
        return False  # torn or foreign: written again
    if f["kernel"] != kernel or f["recipe"] != recipe or f["attrs"].get("dataset") != dump or sorted(l["layer"] for l in f["layers"]) != sorted(layers):
        return False
    for l in f["layers"]:
        if l["context"] != context:
            return False
        if (rows is None) != (l["rows"] is None) or (rows is not None and not np.array_equal(rows, l["rows"])):
            return False
    return True


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
    with ``tensor='torch'`` on ``device`` in ``dtype`` (e.g. 'float16'); window 0 means none. It must
    return the output of every query head and row, [Hq, N, d] (or [1, Hq, N, d]); nothing is
    broadcast or truncated. The outputs are written as qattn-outputs/1 files (kept in
    ``output/outputs/``) and scored exactly as ``qattn score`` scores them: per layer, context and
    head, the kernel against float64, the recipe's emulation against float64 and the kernel
    against the emulation. ``rows`` scores a seeded sample of that many query rows per context
    (the function still computes all). Returns the report's rows (results.jsonl).

    The kernel's outputs are the costly part: each context's file is written into
    ``output/outputs/`` as soon as it is computed, and ``resume=True`` completes an interrupted
    call without calling ``fn`` again for a context whose file is there and matches (same kernel,
    recipe, layers, context and rows). ``force=True`` replaces the report (its outputs are written
    again). Ctrl-C stops scoring between units. ``progress`` shows each kernel call and each scored
    unit on stderr, with an ETA; ``quiet=False`` also prints the report's summary.
    """
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
        if not isinstance(c, (int, np.integer)) or c <= 0 or c > info["n_tokens"]:
            raise ValueError(f"contexts: {c!r}; expected token counts in 1..{info['n_tokens']} ({dump})")
    recipe_line = str(recipe) if recipe is not None else ""
    if recipe_line:
        recipe_line = str(_core.Recipe(recipe_line))  # validated before any work
    name = kernel or getattr(fn, "__name__", "kernel")
    if force and resume:
        raise ValueError("force and resume exclude each other (replace the report, or complete it)")
    existing = "replace" if force else "resume" if resume else "refuse"
    config = os.path.join(output, "config.json")
    if resume and os.path.isfile(config):
        try:
            kind = json.load(open(config)).get("kind")
        except (ValueError, AttributeError):
            kind = None
        if kind != "score":
            raise ValueError(f"{output}: holds a report that qattn.score did not write (kind {kind!r}); resume=True completes only "
                             "a score report: choose another output")
    with _core.claim_report_folder(output, existing, "pass force=True to replace it or resume=True to complete it"):
        keep = os.path.join(output, "outputs")
        os.makedirs(keep, exist_ok=True)
        files = []
        calls, t0 = len(ctxs) * len(chosen), time.monotonic()
        done = 0
        for c in ctxs:
            picked = _core.sample_rows(int(c), int(rows), seed) if rows is not None and rows < c else None
            path = os.path.join(keep, f"{name.replace(os.sep, '_')}-ctx{c}.h5")
            if resume and _outputs_match(path, name, recipe_line, dump, chosen, int(c), picked):
                files.append(path)
                calls -= len(chosen)
                continue
            entries = []
            for lname in chosen:
                d = _core.load_layer(dump, lname, tokens=int(c))
                q, k, v = _inputs(d, tensor, device, dtype, layout)
                where = f"score: {name} on layer {lname}, context {c}"
                out = _to_numpy(fn(q, k, v, causal=d["causal"], window=d["window"], softmax_scale=d["softmax_scale"]), where)
                done += 1
                if progress:
                    spent = time.monotonic() - t0
                    print(f"score: [{done}/{calls}] {name} on layer {lname}, context {c} ({spent:.1f} s; "
                          f"ETA of the calls {spent / done * (calls - done):.0f} s)", file=sys.stderr, flush=True)
                if layout == "BHND":
                    if out.ndim != 4 or out.shape[0] != 1:
                        raise ValueError(f"{where}: the function returned shape {out.shape}; expected [1, Hq, N, d]")
                    out = out[0]
                expected = d["q"].shape
                if out.shape != expected:
                    raise ValueError(f"{where}: the function returned shape {tuple(out.shape)}; expected {tuple(expected)} [Hq, N, d]")
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
            _core.write_outputs(path, name, entries, recipe=recipe_line, dtype="fp32", attrs={"dataset": dump})
            files.append(path)
        _core.score_files(dump, files, output, recipe="", force=True, quiet=quiet, progress=progress)
    with open(os.path.join(output, "results.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]
