#!/usr/bin/env python3
"""Compare the tensors of two qattn-dump files bit for bit (attributes such as created_at may differ).

Exit 0 when every dataset (and every layer attribute but the check results) is identical, 1 otherwise.
Usage: compare_dumps.py A.h5 B.h5
"""
import sys

import h5py
import numpy as np


def datasets(f):
    out = {}
    f.visititems(lambda name, obj: out.__setitem__(name, obj) if isinstance(obj, h5py.Dataset) else None)
    return out


def main():
    a_path, b_path = sys.argv[1:3]
    with h5py.File(a_path, "r") as a, h5py.File(b_path, "r") as b:
        da, db = datasets(a), datasets(b)
        problems = []
        if sorted(da) != sorted(db):
            problems.append(f"different datasets: {sorted(set(da) ^ set(db))}")
        for name in sorted(set(da) & set(db)):
            x, y = da[name][()], db[name][()]
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                diff = np.count_nonzero(x != y) if x.shape == y.shape else "shape"
                problems.append(f"/{name}: differs ({diff} elements)")
        for name in sorted(set(da) & set(db)):
            parent = da[name].parent.name
            for key in ("causal", "sliding_window", "softmax_scale", "rope"):
                if key in a[parent].attrs and a[parent].attrs[key] != b[parent].attrs.get(key):
                    problems.append(f"{parent}: attribute {key} differs")
        print(f"{len(set(da) & set(db))} datasets compared: " + ("identical" if not problems else "DIFFERENT"))
        for p in problems:
            print("  " + p)
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
