"""qattn.fit: the recipe a kernel implements, found from its outputs, as `qattn fit` finds it."""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence, Union

from . import _core
from ._score import _check_count, _check_seed, _check_types, _score


def fit(
    kernel: Union[str, Sequence[str], Callable[..., Any]],
    dump: str,
    *,
    output: str,
    start: Optional[str] = None,
    rows: int = 32,
    seed: int = 1,
    budget: float = 600.0,
    min_gain: float = 0.05,
    top: int = 10,
    beam: int = 3,
    force: bool = False,
    resume: bool = False,
    quiet: bool = True,
    name: Optional[str] = None,
    **score_kwargs: Any,
) -> dict:
    """Find the recipe nearest a kernel's outputs on a dump, and whether it meets the lab's rule.

    ``kernel`` is an outputs file (schema qattn-outputs/1) or a list of them (one kernel's, each
    layer and context once), or an attention function as :func:`qattn.score` takes one
    (``score_kwargs`` are score's: ``layers``, ``contexts``, ``tensor``, ``device``, ``dtype``,
    ``layout``; ``name`` is the kernel's name, score's ``kernel``); its outputs are then written
    and scored into ``output/kernel/`` first, and exactly those are fitted. From ``start`` (default: the files'
    ``recipe`` attribute, or the ``recipe`` given to score), a beam search over single-knob moves
    keeps the move that brings the recipe's emulation nearest the kernel (kernel-vs-recipe SQNR
    over ``rows`` sampled query rows per layer and context), until no move gains more than
    ``min_gain`` dB or ``budget`` seconds are spent; each step expands the ``beam`` nearest recipes. The rule: the kernel at least 30 dB nearer the
    recipe than the recipe is to float64. Writes ``output/`` (summary.md, fit.json,
    candidates.jsonl, config.json); ``resume=True`` reuses an earlier fit's evaluations there.

    Returns {'best': the recipe line, 'meets_rule', 'floor_db': the emulator's own floor at the best
    recipe (its outputs against the same recipe with a float GEMM summed in the other honest order,
    fp32 or exact; inf where no GEMM sums floats so), 'at_floor': the best's remaining distance sits
    within 3 dB of that floor, either side (a GEMM's inner order, not a missing knob), 'path': the start and each move taken (knob,
    line, kernel_vs_recipe_db, recipe_vs_float64_db), 'ranked': the nearest recipes evaluated,
    'evaluated', 'budget_spent', 'seconds', 'skipped' (recipes the search made that do not apply
    to this input, such as a group size that does not divide the head dim: skipped and counted),
    'skipped_why'}.
    """
    _check_types(dump=(dump, (str, os.PathLike), "the path of a dump (qattn-dump/1)"),
                 output=(output, (str, os.PathLike), "the path of a report folder"),
                 start=(start, (str, type(None)), "a recipe line (or None: the outputs files' recipe)"),
                 rows=(rows, (int,), "a number of query rows >= 0 (0: every row)"),
                 budget=(budget, (int, float), "a positive number of seconds"), min_gain=(min_gain, (int, float), "a number of dB >= 0"),
                 top=(top, (int,), "a count >= 1"), beam=(beam, (int,), "a count in 1..64"),
                 force=(force, (bool,), "True or False"), resume=(resume, (bool,), "True or False"), quiet=(quiet, (bool,), "True or False"),
                 name=(name, (str, type(None)), "the kernel's name (or None: the function's name)"))
    _check_seed(seed)
    # Past an int the binding would refuse them with its own name; in range, the fit's checks name them.
    _check_count("rows", rows, -2**31, 2**31 - 1, "a number of query rows >= 0 (0: every row)")
    _check_count("top", top, -2**31, 2**31 - 1, "a count >= 1")
    _check_count("beam", beam, -2**31, 2**31 - 1, "a count in 1..64")
    dump, output = os.fspath(dump), os.fspath(output)
    if callable(kernel):
        with _core.claim_report_for(output, "fit", force, resume):
            outputs_dir = os.path.join(output, "kernel")
            options = dict(layers=None, contexts=None, tensor="numpy", device=None, dtype=None, layout="HND", progress=True)
            unknown = sorted(set(score_kwargs) - set(options))
            if unknown:
                raise ValueError(f"{', '.join(unknown)}: not an option of fit or of qattn.score; expected {', '.join(sorted(options))}")
            options.update(score_kwargs)
            # The function's outputs on every row (fit's `rows` samples them).
            _, files = _score(kernel, dump, output=outputs_dir, recipe=start, kernel=name, rows=None, seed=1, force=not resume, resume=resume,
                              quiet=True, **options)
            # The folder is this call's (claimed above): the fit completes it.
            return _core.fit_files(dump, files, output, start=start or "", rows=rows, seed=seed, budget=budget, min_gain=min_gain, top=top,
                                   beam=beam, force=False, resume=True, quiet=quiet)
    if score_kwargs or name is not None:
        given = sorted(score_kwargs) + (["name"] if name is not None else [])
        raise ValueError(f"{', '.join(given)}: options of an attention function; kernel is outputs files here")
    files = [kernel] if isinstance(kernel, (str, os.PathLike)) else list(kernel)
    return _core.fit_files(dump, [str(f) for f in files], output, start=start or "", rows=rows, seed=seed, budget=budget, min_gain=min_gain,
                           top=top, beam=beam, force=force, resume=resume, quiet=quiet)
