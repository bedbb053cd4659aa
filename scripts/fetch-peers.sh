#!/usr/bin/env bash
# Downloads the peer kernels that `qattn bench gpu` runs beside the lab's, into peers/ (ignored by
# git; scripts/gpu-machine.sh installs what it finds there, since the GPU machine has no network):
#   SageAttention 1.0.6, pure Python + Triton (PyPI wheel, 20 KB).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p peers/wheels
python3 -m pip download --quiet --no-deps sageattention==1.0.6 -d peers/wheels
ls peers/wheels
