#!/usr/bin/env python3
"""kernels/gpu's folders include each other one way only: the folder graph of its #include lines has
no cycle (no two folders include each other, directly or around a loop), and common/ includes no
other folder of kernels/gpu. Usage: test_gpu_include_layers.py REPO_ROOT"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1]) / "kernels" / "gpu"
include = re.compile(r'^\s*#\s*include\s+"kernels/gpu/([A-Za-z0-9_]+)/', re.M)
edges = {}
for f in sorted(root.rglob("*")):
    if f.suffix not in (".hpp", ".cpp", ".cu", ".inc") or f.parent == root:
        continue
    folder = f.relative_to(root).parts[0]
    for target in include.findall(f.read_text(encoding="utf-8")):
        if target != folder:
            edges.setdefault(folder, {}).setdefault(target, str(f.relative_to(root)))

failures = [f"common/ includes {t}/ ({where})" for t, where in edges.get("common", {}).items()]


def cycle_from(start):
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in edges.get(node, {}):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


for folder in sorted(edges):
    loop = cycle_from(folder)
    if loop and loop[0] == min(loop[:-1]):  # each loop reported once, from its smallest folder
        hops = ", ".join(f"{a}/ -> {b}/ ({edges[a][b]})" for a, b in zip(loop, loop[1:]))
        failures.append("a cycle: " + hops)

if failures:
    print("kernels/gpu include layers:\n  " + "\n  ".join(failures), file=sys.stderr)
    sys.exit(1)
print(f"kernels/gpu include layers: {sum(len(v) for v in edges.values())} folder arrows, no cycle")
