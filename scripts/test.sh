#!/usr/bin/env bash
# Installs the dependencies, configures, builds and runs every test that needs no GPU; when nvcc is
# present, also compiles the CUDA build of the GPU kernels and their tests (nothing runs them here).
# This is the README's test command and what CI (.ci/run) calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${QATTN_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --parallel
ctest --test-dir "$build" --output-on-failure --label-exclude gpu
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "test.sh: compiling the CUDA build (QATTN_GPU=CUDA, compile only)"
  cmake -S . -B "$build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_GPU=CUDA >/dev/null
  cmake --build "$build-cuda" --parallel --target qattn_gpu test_gpu qattn
fi
