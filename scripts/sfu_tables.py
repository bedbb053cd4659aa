#!/usr/bin/env python3
"""Builds the stored models of the GPU's approximate exp2 and reciprocal from a probe's output
(`qattn_sfu_probe DIR` on the GPU machine, kernels/gpu/probes/sfu_probe_main.cpp):
  kernels/numerics/data/{ex2,rcp}_approx_ftz.dev.zz   the base-binade table as int8 ulps from the
      correctly rounded value, zlib-compressed (the emulator reads it, kernels/numerics/sfu_math.cpp)
  tests/data/sfu-h100/{ex2,rcp}_ftz_samples.u32        every fourth (input, result) pair of the
      probe's fresh random sample (16384, from each of its input classes), which the stored models
      must reproduce bit for bit
    sfu_tables.py PROBE_DIR"""
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    probe = Path(sys.argv[1])
    for op in ("ex2", "rcp"):
        dev = (probe / f"{op}_ftz_table_dev.i8").read_bytes()
        if len(dev) != 1 << 23:
            print(f"{probe / f'{op}_ftz_table_dev.i8'}: {len(dev)} bytes; expected 2^23 (one int8 a base-binade entry)", file=sys.stderr)
            return 1
        (ROOT / "kernels" / "numerics" / "data" / f"{op}_approx_ftz.dev.zz").write_bytes(zlib.compress(dev, 9))
        samples = (probe / f"{op}_ftz_samples.u32").read_bytes()
        pairs = [samples[i : i + 8] for i in range(0, len(samples), 32)]
        (ROOT / "tests" / "data" / "sfu-h100" / f"{op}_ftz_samples.u32").write_bytes(b"".join(pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
