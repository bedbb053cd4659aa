#!/usr/bin/env bash
# llama.cpp's CUDA flash attention beside the llamacpp-q8_0 and llamacpp-q4_0 presets, on the H200
# machine: builds ggml with its CUDA backend from its source (github ggml-org/ggml at d99724f, not
# part of the project; sm_90, about three minutes on 16 cores) while qattn's package builds, then the
# project's harness (scripts/peers/llamacpp_cpu, --backend cuda), runs prove_llamacpp_cpu.py
# --backend cuda on the dump and on its random dumps, and scores every output named by a preset
# (score-peers.sh: single-row decode, ggml-cuda's vector kernel). Prefill runs ggml-cuda's
# tensor-core kernel, which no preset models: written for the dump's layers 0 and 15 (and every
# random dump), to be scored by hand. Steps whose result exists are skipped, so a second call on a
# warm machine only runs.
# Carry GGML_SOURCE and wheels/ (the pinned nanobind wheel).
# Usage (from the repository root): bash scripts/peers/prove-llamacpp-cuda-on-h200.sh GGML_SOURCE OUT_DIR [DUMP]
set -euo pipefail
src=${1:?usage: prove-llamacpp-cuda-on-h200.sh GGML_SOURCE OUT_DIR [DUMP]}
out=${2:?usage: prove-llamacpp-cuda-on-h200.sh GGML_SOURCE OUT_DIR [DUMP]}
dump=${3:-datasets/smollm2-135m-2k.h5}
[[ -f $src/include/ggml.h ]] || { echo "prove-llamacpp-cuda-on-h200.sh: $src is not ggml's source tree (no include/ggml.h)" >&2; exit 2; }
mkdir -p "$out"
jobs=$(nproc)
if [[ ! -f build-peers/harness/qattn ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site wheels/nanobind-2.9.2-py3-none-any.whl
  (PYTHONPATH=/tmp/site cmake -S . -B build-peers -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_PYTHON="$(command -v python3)" \
     -DQATTN_BUILD_TESTS=OFF -DQATTN_DEVICE_CHECK=OFF -DQATTN_PYTHON_PACKAGE=ON && cmake --build build-peers --parallel 6) \
    > "$out/qattn-build.log" 2>&1 &
  qattn_build=$!
  trap 'kill "$qattn_build" 2>/dev/null || true' EXIT
fi
if [[ ! -f peers/ggml-cuda-install/include/ggml-cuda.h ]]; then
  start=$(date +%s)
  { cmake -S "$src" -B peers/ggml-cuda-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DGGML_CCACHE=OFF &&
    cmake --build peers/ggml-cuda-build --parallel "$jobs" &&
    cmake --install peers/ggml-cuda-build --prefix peers/ggml-cuda-install; } > "$out/ggml-cuda-build.log" 2>&1 ||
    { tail -30 "$out/ggml-cuda-build.log"; exit 1; }
  echo "ggml with CUDA built in $(( $(date +%s) - start )) s"
fi
cmake -S scripts/peers/llamacpp_cpu -B peers/attn-ggml-cuda-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_DIR=peers/ggml-cuda-install > "$out/attn-ggml-build.log" 2>&1 || { tail -30 "$out/attn-ggml-build.log"; exit 1; }
grep -q "backends cpu and cuda" "$out/attn-ggml-build.log" || { echo "attn_ggml: ggml-cuda not found" >&2; exit 1; }
cmake --build peers/attn-ggml-cuda-build >> "$out/attn-ggml-build.log" 2>&1 || { tail -30 "$out/attn-ggml-build.log"; exit 1; }
if [[ -n ${qattn_build:-} ]]; then
  wait "$qattn_build" || { tail -30 "$out/qattn-build.log"; exit 1; }
fi
export PYTHONPATH=$PWD/build-peers/python
harness=peers/attn-ggml-cuda-build/attn_ggml
python3 scripts/peers/prove_llamacpp_cpu.py "$harness" "$out" --backend cuda --types q8_0,q4_0 --dump "$dump" \
        --prefill-layers 0,15 --ggml-version "ggml d99724f (CUDA, sm_90)"
python3 scripts/peers/prove_llamacpp_cpu.py "$harness" "$out" --backend cuda --types q8_0,q4_0 --synth build-peers/harness/qattn \
        --decode-rows 16 --ggml-version "ggml d99724f (CUDA, sm_90)"
QATTN=build-peers/harness/qattn bash scripts/peers/score-peers.sh "$out" "$dump" "$out"/inputs/*.h5
