#!/usr/bin/env python3
"""Static instruction count of the wgmma family's key-tile loop, per thread, from the SASS of an
sm_90a object (no GPU needed): the path one unmasked tile executes once the row maxima have settled
(the mask's branch not taken, the O rescale skipped), for the int8 Q K^T + e4m3 P V instantiations.

    python3 scripts/wgmma_tile_count.py build-cuda/kernels/gpu/CMakeFiles/qattn_gpu.dir/wgmma/flash_wgmma.cu.o \
        [--cuobjdump PATH]

cuobjdump comes with the CUDA toolkit, or from PyPI's nvidia-cuda-cuobjdump wheel. How the path is
found: the tile loop is the innermost backward branch whose body holds the mask's uniform branch
(`BRA P, target`), which the path takes; a forward branch over a block of FMULs alone is the rescale
of O by alpha, which the path skips. Kernel PERF.md quotes these counts.
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys

KERNEL = re.compile(r"flash_wgmma_kernelILNS0_6QkTypeE0ELNS0_6PvTypeE0ELi(\d+)ELi(\d+)ELb([01])ELb0ELb([01])E")
INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
BRANCH = re.compile(r"BRA\s.*?0x([0-9a-f]+)")


def functions(sass):
    """(template arguments, [(address, text)]) per sm_90a function of the int8 + e4m3 family."""
    name, body = None, []
    for line in sass.splitlines():
        if "Function :" in line:
            if name and body:
                yield name, body
            m = KERNEL.search(line)
            name, body = (m.groups() if m else None), []
        elif name:
            m = INSTRUCTION.match(line)
            if m:
                body.append((int(m.group(1), 16), m.group(2).strip()))
    if name and body:
        yield name, body


def tile_path(ins):
    index = {a: i for i, (a, _) in enumerate(ins)}
    loop = None
    for i, (a, text) in enumerate(ins):
        m = BRANCH.search(text)
        if m and int(m.group(1), 16) < a:
            b = index[int(m.group(1), 16)]
            if any(re.search(r"BRA\s+P\d+,", t) for _, t in ins[b : i + 1]) and (loop is None or i - b < loop[1] - loop[0]):
                loop = (b, i)
    if loop is None:
        return None
    path, i = [], loop[0]
    while i <= loop[1]:
        text = ins[i][1]
        path.append(text)
        m = re.search(r"BRA\s+P\d+,\s*0x([0-9a-f]+)", text)
        if m:
            i = index[int(m.group(1), 16)]
            continue
        m = re.search(r"@!?P\d BRA 0x([0-9a-f]+)", text)
        if m:
            target = index[int(m.group(1), 16)]
            if target > i + 1 and all(t.startswith("FMUL") for _, t in ins[i + 1 : target]):
                i = target
                continue
        i += 1
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("object", help="flash_wgmma.cu.o of a CUDA build for sm_90a")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    a = ap.parse_args()
    try:
        sass = subprocess.run([a.cuobjdump, "-sass", a.object], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"wgmma_tile_count: cuobjdump -sass {a.object} failed: {e}")
    rows = {}
    for (d, bc, per_tile, quant_denom), ins in functions(sass):
        path = tile_path(ins)
        if path is None or not any("GMMA" in t for t in path):
            continue  # a pass without wgmma (the kernel's body dropped)
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in path)
        key = (int(d), int(bc), per_tile == "1", quant_denom == "1")
        rows[key] = (len(path), ops)
    if not rows:
        sys.exit(f"wgmma_tile_count: no sm_90a int8 + e4m3 flash_wgmma_kernel in {a.object}")
    print("| d | keys a tile | P V | l sums | per tile | per 64 keys | FMUL | FADD | MUFU | GMMA |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for (d, bc, per_tile, qd), (n, ops) in sorted(rows.items()):
        print(f"| {d} | {bc} | {'per tile' if per_tile else 'into O'} | {'rounded P' if qd else 'P before rounding'} | {n} | "
              f"{n * 64 / bc:.0f} | {ops['FMUL']} | {ops['FADD']} | {ops['MUFU']} | {ops['IGMMA'] + ops['QGMMA']} |")


if __name__ == "__main__":
    main()
