#!/usr/bin/env python3
"""Render a qattn report folder's figures from its figure data (matplotlib).

Figures (PNG, in REPORT/figures/):
  p_mass_per_decade.png   mean row mass per probability decade, one panel per context length,
                          with each P format's flush threshold marked
  k_channel_outliers.png  K's worst channel absmax over the median channel's, raw vs K-mean smoothed
                          (channel_outliers.csv also holds Q and V)
  sqnr_per_recipe.png     SQNR per recipe and layer (mean over heads and contexts; sqnr_by_layer.csv)
  error_vs_context.png    SQNR, KL(P_ref || P) and relative L2 against context length, per recipe
                          (error_by_context.csv); both drawn from the lab's own aggregates
  mass_flushed.png        the reference's row mass each P format flushes, against context length
Titles name the model and what each point pools (heads, layers, contexts); legends sit outside the
axes; labels are never cut (bbox_inches="tight").
Usage: plot_report.py REPORT_DIR [--quiet]   (--quiet: name no figure on stdout)
"""
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def cell(text):
    """A CSV field as the lab wrote it, back as text: a leading apostrophe the writer put before
    = + - @ tab or CR (so a spreadsheet keeps the field as text, not a formula) is not the name's."""
    return text[1:] if len(text) >= 2 and text[0] == "'" and text[1] in "=+-@\t\r" else text


def read_csv(path):
    with open(path, newline="") as f:
        return [{k: cell(v) if isinstance(v, str) else v for k, v in row.items()} for row in csv.DictReader(f)]


def save(fig, figs, name, written):
    fig.tight_layout()
    out = os.path.join(figs, name)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    written.append(out)


EXACT_DB = 150  # where a bar or point whose SQNR is infinite (bit-exact rows) is drawn


def drawn_db(text):
    """An aggregate SQNR as drawn: its value, an infinite one (a recipe exact on every row) at EXACT_DB."""
    v = float(text)
    return EXACT_DB if math.isinf(v) and v > 0 else v


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def main():
    report = sys.argv[1]
    figs = os.path.join(report, "figures")
    decades = read_csv(os.path.join(figs, "p_mass_per_decade.csv"))
    flushed = read_csv(os.path.join(figs, "mass_flushed.csv"))
    outliers = [r for r in read_csv(os.path.join(figs, "channel_outliers.csv")) if r["tensor"] == "k"]
    # The per-recipe aggregates the lab computed (the summary's numbers); drawn here, never recomputed.
    by_layer = read_csv(os.path.join(figs, "sqnr_by_layer.csv"))
    by_context = read_csv(os.path.join(figs, "error_by_context.csv"))
    model = ""
    try:
        import json
        with open(os.path.join(report, "config.json")) as f:
            model = json.load(f).get("model", "")
    except (OSError, ValueError):
        pass
    model = model if len(model) <= 60 else model[:57] + "..."  # a title, not a dump of the attribute
    tag = f"{model}: " if model else ""
    written = []

    # P mass per decade, per context length.
    contexts = sorted({int(r["context"]) for r in decades})
    lows = ["1e-1", "1e-2", "1e-3", "1e-4", "1e-5", "1e-6", "1e-7", "1e-8", "0"]
    labels = ["[1e-1,1]"] + [f"[1e-{k + 1},1e-{k})" for k in range(1, 8)] + ["<1e-8"]
    thresholds = {}
    for r in flushed:
        thresholds[r["p_format"]] = float(r["threshold"])
    if contexts:
        fig, axes = plt.subplots(1, len(contexts), figsize=(5.5 * len(contexts), 4.2), sharey=True, squeeze=False)
        for ax, ctx in zip(axes[0], contexts):
            m = [mean(float(r["mass"]) for r in decades if int(r["context"]) == ctx and r["decade_low"] == lo) for lo in lows]
            ax.bar(range(len(lows)), [100 * x for x in m], color="#3b7dd8")
            ax.set_xticks(range(len(lows)), labels, rotation=45, ha="right", fontsize=8)
            ax.set_title(f"context {ctx} tokens")
            ax.set_xlabel("probability p (relative to 1), decade")
            for k, (name, t) in enumerate(sorted(thresholds.items(), key=lambda kv: -kv[1])):
                # Bar k spans log10 p from -k (left edge, x = k - 0.5) to -(k+1) (right edge):
                # p = t (relative to the row max) sits at x = -log10(t) - 0.5.
                pos = -math.log10(t) - 0.5
                ax.axvline(pos, linestyle="--", linewidth=1, color="#c0392b" if "int8" in name else "#27ae60")
                ax.text(pos + 0.08 + 0.35 * (k % 2), ax.get_ylim()[1] * 0.95, f"{name}: p/max < {t:.1e}",
                        fontsize=7, rotation=90, va="top")
        axes[0][0].set_ylabel("share of row mass (%), mean over rows and heads")
        fig.suptitle(f"{tag}attention probability mass per decade (float64 reference; mean over sampled rows, heads, layers)")
        save(fig, figs, "p_mass_per_decade.png", written)

    # K channel outliers, raw vs smoothed.
    if outliers:
        layers = sorted({r["layer"] for r in outliers}, key=lambda s: (len(s), s))
        raw = [max(float(r["channel_ratio_raw"]) for r in outliers if r["layer"] == l) for l in layers]
        smo = [max(float(r["channel_ratio_smoothed"]) for r in outliers if r["layer"] == l) for l in layers]
        fig, ax = plt.subplots(figsize=(7, 4))
        x = range(len(layers))
        ax.bar([i - 0.2 for i in x], raw, width=0.4, label="K as dumped", color="#c0392b")
        ax.bar([i + 0.2 for i in x], smo, width=0.4, label="K minus its channel mean", color="#27ae60")
        ax.set_xticks(list(x), [f"layer {l}" for l in layers])
        ax.set_ylabel("worst channel absmax / median channel absmax (x)")
        ax.set_title(f"{tag}K channel outliers before and after mean subtraction (worst KV head per layer)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        save(fig, figs, "k_channel_outliers.png", written)

    # SQNR per recipe and layer; error against context length per recipe.
    recipes = []
    for r in by_layer:
        if r["recipe"] not in recipes:
            recipes.append(r["recipe"])
    layers = sorted({r["layer"] for r in by_layer}, key=lambda s: (len(s), s))
    if by_layer:
        fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(recipes)), 4.5))
        width = 0.8 / max(1, len(layers))
        for k, l in enumerate(layers):
            vals = {r["recipe"]: drawn_db(r["mean_sqnr_db"]) for r in by_layer if r["layer"] == l}
            ax.bar([i + k * width for i in range(len(recipes))], [vals.get(rec, float("nan")) for rec in recipes], width=width, label=f"layer {l}")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(recipes))], recipes, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(f"SQNR (dB) vs float64 (exact drawn at {EXACT_DB:.0f})")
        ax.set_title(f"{tag}output SQNR per recipe and layer (mean over heads and contexts)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        save(fig, figs, "sqnr_per_recipe.png", written)

        # Error against context: SQNR, KL (when the rows carry it) and relative L2, one panel each,
        # the contexts themselves as ticks, one legend below the panels.
        ctxs = sorted({int(r["context"]) for r in by_context})
        have_kl = any(r["mean_kl"] for r in by_context)
        panels = [("mean_sqnr_db", "SQNR (dB) vs float64", False), ("mean_rel_l2", "relative L2 error vs float64", True)]
        if have_kl:
            panels.insert(1, ("mean_kl", "KL(P_ref || P) per row", True))
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
        for ax, (col, label, logy) in zip(axes[0], panels):
            for rec in recipes:
                point = {int(r["context"]): r[col] for r in by_context if r["recipe"] == rec and r[col] != ""}
                ys = [float("nan") if c not in point else drawn_db(point[c]) if col == "mean_sqnr_db" else max(float(point[c]), 1e-12)
                      for c in ctxs]
                ax.plot(ctxs, ys, marker="o", label=rec)
            ax.set_xscale("log", base=2)
            ax.set_xticks(ctxs, [str(c) for c in ctxs], fontsize=8)
            ax.minorticks_off()
            if logy:
                ax.set_yscale("log")
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
        handles, names = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, len(names)), fontsize=8)
        fig.suptitle(f"{tag}error against context length (each point: mean over layers and heads)")
        save(fig, figs, "error_vs_context.png", written)

    # The reference's mass at or below each P format's flush threshold, against context.
    if flushed:
        formats = sorted({r["p_format"] for r in flushed})
        fctx = sorted({int(r["context"]) for r in flushed})
        fig, ax = plt.subplots(figsize=(10, 4.2))
        for fmt in formats:
            ys = [mean(float(r["mass_flushed"]) for r in flushed if r["p_format"] == fmt and int(r["context"]) == c) for c in fctx]
            ax.plot(fctx, [max(y, 1e-12) for y in ys], marker="o", label=f"{fmt} (p/max < {thresholds[fmt]:.1e})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(fctx, [str(c) for c in fctx], fontsize=8)
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("row mass flushed to zero (float64 P)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        ax.set_title(f"{tag}mass a static P format flushes\n(mean over sampled rows, heads, layers)", fontsize=10)
        save(fig, figs, "mass_flushed.png", written)

    for w in written if "--quiet" not in sys.argv[2:] else []:
        print(f"figure: {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
