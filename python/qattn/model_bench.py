"""The time of one end-to-end configuration (model, context, recipe, backend) and where it goes.

    .venv-dump/bin/python -m qattn.model_bench --model smollm2 --context 2048 --recipe "q=int8/token k=int8/token"

One window of the evaluation's text, three forward passes of the decoder: the model's own attention
(its SDPA, float32), the float64 reference in every layer (the baseline), and the recipe; then the
model's head and the per-position metrics of one comparison. Each pass is split into the lab's
attention and the rest of the model, and set against the model's own forward pass.
"""
import argparse
import sys
import time

from . import model_eval as me
from ._model_experiment import KINDS, REFERENCE


def bench(model_name, context, recipe, backend="emulate", threads=2):
    import torch

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    t0 = time.perf_counter()
    facts = me.model_facts(model_name)
    if context > len(facts["ids"]):
        raise me.EvalError(f"--context {context}: the text has {len(facts['ids'])} tokens")
    model = me._model(model_name)
    load = time.perf_counter() - t0
    ids = facts["ids"][:context]
    line = recipe if recipe == REFERENCE else str(me._core.Recipe(recipe))
    passes = []
    for name, plan in (("model's own attention (SDPA float32)", None),
                       ("float64 reference (the baseline)", me._Plan({k: REFERENCE for k in KINDS}, None, backend, threads)),
                       (f"recipe ({backend})", me._Plan({k: line for k in KINDS}, None, backend, threads))):
        t = time.perf_counter()
        h, attention = me.hidden_states(model, ids, plan)
        passes.append((name, time.perf_counter() - t, attention, h))
    t = time.perf_counter()
    me.compare_positions(model, passes[1][3], {"recipe": passes[2][3]}, ids)
    metrics = time.perf_counter() - t
    return {"load": load, "passes": [(n, s, a) for n, s, a, _ in passes], "metrics": metrics}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qattn.model_bench", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--context", type=int, required=True)
    ap.add_argument("--recipe", required=True, help="a one-line recipe (or 'reference')")
    ap.add_argument("--backend", default="emulate", choices=["emulate", "gpu"])
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    try:
        r = bench(a.model, a.context, a.recipe, a.backend, a.threads)
    except ValueError as e:
        print(f"qattn.model_bench: error: {e}", file=sys.stderr)
        return 2
    own = r["passes"][0][1]
    print(f"{a.model}, {a.context} tokens, {a.threads} threads; model load {r['load']:.1f} s")
    print(f"recipe: {a.recipe}")
    print("| decoder forward pass | total s | lab attention s | rest of the model s | x own pass |")
    print("|---|---:|---:|---:|---:|")
    for k, (name, total, attention) in enumerate(r["passes"]):
        lab = "-" if k == 0 else f"{attention:.2f}"  # the model's own pass has no lab attention to split off
        print(f"| {name} | {total:.2f} | {lab} | {total - attention:.2f} | {total / own:.1f} |")
    print(f"| head + metrics of one comparison (float64 vs recipe) | {r['metrics']:.2f} | | | {r['metrics'] / own:.1f} |")
    per_config = r["passes"][2][1] + r["metrics"]
    print(f"one recipe in an evaluation costs {per_config:.1f} s ({per_config / own:.1f}x the model's own forward pass)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
