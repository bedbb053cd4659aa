#!/usr/bin/env bash
# Downloads the peer kernels that `qattn bench gpu` runs beside the lab's, into peers/ (ignored by
# git; scripts/gpu-machine.sh installs what it finds there, since the GPU machine has no network):
#   SageAttention 1.0.6, pure Python + Triton (PyPI wheel, 20 KB);
#   FlashAttention-3's forward, fa3-fwd 0.0.3 (PyPI wheel for sm90, CPython 3.9+ stable ABI, 27.5 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p peers/wheels
python3 -m pip download --quiet --no-deps sageattention==1.0.6 -d peers/wheels
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_24_x86_64 fa3-fwd==0.0.3 -d peers/wheels
ls peers/wheels
