#!/usr/bin/env python3
"""Render a `qattn score` report's figure from its figure data (matplotlib).

  figures/score_per_head.png  per layer and context (one panel each), per query head: the kernel
                              against float64, the recipe's emulation against float64 and the kernel
                              against the emulation, SQNR in dB (infinite values drawn at the top)
Usage: plot_score.py REPORT_DIR [--quiet]   (--quiet: name no figure on stdout)
"""
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from plot_report import read_csv  # noqa: E402  (beside this script, installed with it)


def num(s):
    return float(s) if s not in ("", None) else float("nan")


def main():
    report = sys.argv[1]
    rows = read_csv(os.path.join(report, "figures", "score_per_head.csv"))
    if not rows:
        return
    panels = sorted({(r["kernel"], r["layer"], int(r["context"])) for r in rows}, key=lambda x: (x[0], len(x[1]), x[1], x[2]))
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.6 * nrows), squeeze=False)
    series = [("kernel_vs_float64_db", "kernel vs float64", "C0"), ("recipe_vs_float64_db", "recipe vs float64", "C1"),
              ("kernel_vs_recipe_db", "kernel vs recipe", "C2")]
    finite = [num(r[k]) for r in rows for k, _, _ in series if math.isfinite(num(r[k]))]
    top = (max(finite) if finite else 100) + 10
    for ax, (kernel, layer, ctx) in zip(axes.flat, panels):
        sel = sorted((r for r in rows if r["kernel"] == kernel and r["layer"] == layer and int(r["context"]) == ctx), key=lambda r: int(r["head"]))
        heads = [int(r["head"]) for r in sel]
        for i, (key, label, color) in enumerate(series):
            vals = [num(r[key]) for r in sel]
            if all(math.isnan(v) for v in vals):
                continue
            ax.bar([h + (i - 1) * 0.27 for h in heads], [top if math.isinf(v) else v for v in vals], width=0.27, label=label, color=color)
        ax.set_title(f"{kernel}: layer {layer}, {ctx} tokens", fontsize=9)
        ax.set_xlabel("query head")
        ax.set_ylabel("SQNR (dB)")
        ax.set_xticks(heads)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, fontsize=9, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    out = os.path.join(report, "figures", "score_per_head.png")
    fig.savefig(out, dpi=110)
    if "--quiet" not in sys.argv[2:]:
        print(f"figures: {out}")


if __name__ == "__main__":
    main()
