#!/usr/bin/env python3
"""Compare QFlash's outputs (written by capture_qflash.py on the GPU machine) with the lab's
preset, output by output: how many are bit-equal, and for each that is not, where it is and how
it differs (in int8 output levels of V's scale).

Usage: compare_qflash.py DIR [--recipe LINE]   (DIR holds CASE.h5 and CASE-qflash.h5 pairs)
"""
import argparse
import glob
import os

import numpy as np

import qattn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--recipe", default="preset=qflash-46adca5")
    a = ap.parse_args()
    recipe = qattn.Recipe(a.recipe)
    total = equal = 0
    print(f"recipe: {recipe}")
    print("| case | outputs | bit-equal | differ | of them one int8 level nearer zero in the kernel | kernel vs float64 dB | kernel vs preset dB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for dump in sorted(glob.glob(os.path.join(a.dir, "*.h5"))):
        if dump.endswith("-qflash.h5"):
            continue
        name = os.path.basename(dump)[:-3]
        kern = qattn.read_outputs(os.path.join(a.dir, name + "-qflash.h5"))["layers"][0]["o"]
        d = qattn.load_layer(dump, "0")
        kw = dict(causal=d["causal"], window=d["window"], softmax_scale=d["softmax_scale"])
        emu = qattn.emulate(d["q"], d["k"], d["v"], recipe, **kw)["out"]
        ref = qattn.reference(d["q"], d["k"], d["v"], **kw)["out"]
        sv = qattn.quantize(d["v"], "int8/tensor/scale:fp16/div:fp16").scales[0]
        diff = np.argwhere(kern != emu)
        # In V's int8 levels: the kernel's output is code * s_v rounded to fp16, so the code is recovered by rounding.
        kc, ec = np.rint(kern / sv), np.rint(emu / sv)
        nearer = int(np.sum((np.abs(kc) == np.abs(ec) - 1) & (np.sign(kc) * np.sign(ec) >= 0) & (kern != emu)))
        total += kern.size
        equal += kern.size - len(diff)
        print(f"| {name} | {kern.size} | {kern.size - len(diff)} | {len(diff)} | {nearer} | "
              f"{qattn.compare(ref, kern)['sqnr_db']:.2f} | {qattn.compare(emu, kern)['sqnr_db']:.2f} |")
        for h, row, c in diff[:3]:
            print(f"    head {h} row {row} channel {c}: kernel {kern[h, row, c]} (level {kc[h, row, c]:.0f}), preset {emu[h, row, c]} (level {ec[h, row, c]:.0f})")
    print(f"all cases: {equal} of {total} outputs bit-equal ({total - equal} differ)")


if __name__ == "__main__":
    main()
