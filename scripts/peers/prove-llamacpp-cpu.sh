#!/usr/bin/env bash
# llama.cpp's CPU flash attention beside the llamacpp-*-cpu presets, on this machine: builds ggml's
# CPU backend from its source (github ggml-org/ggml at d99724f, not part of the project; x86 baseline
# with AVX2, -DGGML_NATIVE=OFF, so the result does not depend on this CPU's AVX-512) and the
# project's harness (scripts/peers/llamacpp_cpu), runs prove_llamacpp_cpu.py on the shipped dump and
# on its random dumps, and scores every output against its preset (score-peers.sh).
# Usage (from the repository root, after the README's build): bash scripts/peers/prove-llamacpp-cpu.sh GGML_SOURCE OUT_DIR
set -euo pipefail
src=${1:?usage: prove-llamacpp-cpu.sh GGML_SOURCE OUT_DIR}
out=${2:?usage: prove-llamacpp-cpu.sh GGML_SOURCE OUT_DIR}
[[ -f $src/include/ggml.h ]] || { echo "prove-llamacpp-cpu.sh: $src is not ggml's source tree (no include/ggml.h)" >&2; exit 2; }
jobs=$(nproc)
cmake -S "$src" -B peers/ggml-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_BUILD_TESTS=OFF \
      -DGGML_BUILD_EXAMPLES=OFF -DGGML_CCACHE=OFF > /dev/null
cmake --build peers/ggml-build --parallel "$jobs" > /dev/null
cmake --install peers/ggml-build --prefix peers/ggml-install > /dev/null
cmake -S scripts/peers/llamacpp_cpu -B peers/attn-ggml-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_DIR=peers/ggml-install > /dev/null
cmake --build peers/attn-ggml-build > /dev/null
py=${PYTHON:-.venv/bin/python}
export PYTHONPATH=build/python
"$py" scripts/peers/prove_llamacpp_cpu.py peers/attn-ggml-build/attn_ggml "$out" --dump datasets/smollm2-135m-2k.h5 --check-threads
"$py" scripts/peers/prove_llamacpp_cpu.py peers/attn-ggml-build/attn_ggml "$out" --synth build/harness/qattn --decode-rows 16
bash scripts/peers/score-peers.sh "$out" datasets/smollm2-135m-2k.h5 "$out"/inputs/*.h5
