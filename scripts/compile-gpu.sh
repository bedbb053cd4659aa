#!/usr/bin/env bash
# Compiles the GPU builds that cannot run on a machine without a GPU, as CI does (.ci/run): the CUDA
# build (QATTN_GPU=CUDA, sm_89 and sm_90a) when nvcc is present, and the HIP build (QATTN_GPU=HIP)
# when its packages are (install-deps.sh installs them on Debian 12). Nothing runs. About 16 minutes
# on the 2-core development machine, so the README's test command (scripts/test.sh) leaves it out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >/dev/null   # the toolchains (HIP packages on Debian 12); idempotent
build=${QATTN_BUILD_DIR:-build}
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "compile-gpu: the CUDA build (QATTN_GPU=CUDA, compile only)"
  cmake -S . -B "$build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_GPU=CUDA >/dev/null
  cmake --build "$build-cuda" --parallel --target qattn_gpu test_gpu qattn
  # On a machine without a GPU or driver (CI's), the one thing the CUDA build can run: `--backend gpu`
  # says so in words before any work, instead of the first cudaMalloc's error.
  if ! nvidia-smi -L >/dev/null 2>&1; then
    said=$("$build-cuda/harness/qattn" eval --data datasets/smollm2-135m-2k.h5 --layer 15 --recipe "q=int8/token k=int8/token" --backend gpu 2>&1) && {
      echo "compile-gpu: --backend gpu ran on a machine without a GPU" >&2; exit 1; }
    if ! grep -qE "eval --backend 'gpu': no (usable GPU or GPU driver on this machine|GPU is visible to this process)" <<< "$said"; then
      echo "compile-gpu: --backend gpu without a GPU said: $said" >&2
      exit 1
    fi
    echo "compile-gpu: without a GPU, --backend gpu says: ${said#qattn: error: }"
  fi
else
  echo "compile-gpu: no nvcc; the CUDA build is skipped"
fi
if command -v clang++-15 >/dev/null 2>&1 && [[ -e /usr/include/hip/hip_runtime.h ]]; then
  echo "compile-gpu: the HIP build (QATTN_GPU=HIP, compile only)"
  # Also the build without MPI (QATTN_MPI=OFF): qattn run is then one process, as it always may be.
  cmake -S . -B "$build-hip" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_GPU=HIP -DQATTN_MPI=OFF >/dev/null
  cmake --build "$build-hip" --parallel --target qattn_gpu test_gpu qattn
elif (. /etc/os-release && [[ $ID == debian && $VERSION_ID == 12 ]]); then
  echo "compile-gpu: clang++-15 or the HIP headers are missing, though install-deps.sh installs them here" >&2
  exit 1
else
  echo "compile-gpu: no HIP toolchain (clang++-15, libamdhip64-dev); the HIP build is skipped"
fi
echo "compile-gpu: PASS (the GPU builds compiled)"
