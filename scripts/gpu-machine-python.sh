#!/usr/bin/env bash
# On the GPU machine: the Python package in the CUDA build, on the machine's own Python (which has
# torch but not nanobind: pass a folder holding the pinned nanobind wheel, e.g. from
# `pip download nanobind==2.9.2 --no-deps`). Builds qattn and the package, then runs the package's
# CPU tests (tests/python, tests/untrusted) and its GPU tests (tests/python_gpu: gpu_run against the emulator, and
# qattn.score of a torch function on the GPU against `qattn score`), writing logs into LOG_DIR.
#   bash scripts/gpu-machine-python.sh WHEEL_DIR LOG_DIR [CUDA_ARCHS]   (default 90a)
set -uo pipefail
cd "$(dirname "$0")/.."
wheels=${1:?usage: gpu-machine-python.sh WHEEL_DIR LOG_DIR [CUDA_ARCHS]}
logs=${2:?usage: gpu-machine-python.sh WHEEL_DIR LOG_DIR [CUDA_ARCHS]}
archs=${3:-90a}  # 90a: the wgmma family needs the arch-specific target
mkdir -p "$logs"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/nanobind-2.9.2-py3-none-any.whl || exit 1
export PYTHONPATH="$site"
cmake -S . -B build-gpu-python -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_PYTHON="$(command -v python3)" -DQATTN_GPU=CUDA \
      -DCMAKE_CUDA_ARCHITECTURES="$archs" -DQATTN_DEVICE_CHECK=OFF -DQATTN_PYTHON_PACKAGE=ON > "$logs/python-configure.log" 2>&1 \
  || { tail -20 "$logs/python-configure.log"; exit 1; }
cmake --build build-gpu-python --parallel --target qattn qattn_python_stub > "$logs/python-build.log" 2>&1 \
  || { tail -30 "$logs/python-build.log"; exit 1; }
export PYTHONPATH="$PWD/build-gpu-python/python:$site" QATTN_EXE="$PWD/build-gpu-python/harness/qattn" QATTN_SOURCE_DIR="$PWD"
status=0
for suite in python untrusted python_gpu; do
  if python3 -m pytest -q -p no:cacheprovider "tests/$suite" > "$logs/pytest-$suite.log" 2>&1; then echo "ok   tests/$suite"
  else echo "FAIL tests/$suite (see $logs/pytest-$suite.log)"; status=1; fi
  tail -1 "$logs/pytest-$suite.log"
done
exit $status
