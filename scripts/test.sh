#!/usr/bin/env bash
# Installs the dependencies (and the dumper's environment, for the end-to-end evaluation's tests),
# configures, builds and runs every test that needs no GPU; when nvcc is present, also compiles the
# CUDA build of the GPU kernels and their tests, and when the HIP packages are (install-deps.sh
# installs them on Debian 12), the HIP build (nothing runs either here).
# This is the README's test command and what CI (.ci/run) calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/install-dumper.sh   # torch + transformers + the models: the end-to-end evaluation's tests
build=${QATTN_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --parallel
bash scripts/install-python.sh "$build"   # import qattn from .venv
ctest --test-dir "$build" --output-on-failure --label-exclude gpu
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "test.sh: compiling the CUDA build (QATTN_GPU=CUDA, compile only)"
  cmake -S . -B "$build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_GPU=CUDA >/dev/null
  cmake --build "$build-cuda" --parallel --target qattn_gpu test_gpu qattn
else
  echo "test.sh: no nvcc; the CUDA build is skipped"
fi
if command -v clang++-15 >/dev/null 2>&1 && [[ -e /usr/include/hip/hip_runtime.h ]]; then
  echo "test.sh: compiling the HIP build (QATTN_GPU=HIP, compile only)"
  cmake -S . -B "$build-hip" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_GPU=HIP >/dev/null
  cmake --build "$build-hip" --parallel --target qattn_gpu test_gpu qattn
elif (. /etc/os-release && [[ $ID == debian && $VERSION_ID == 12 ]]); then
  echo "test.sh: clang++-15 or the HIP headers are missing, though install-deps.sh installs them here" >&2
  exit 1
else
  echo "test.sh: no HIP toolchain (clang++-15, libamdhip64-dev); the HIP build is skipped"
fi
