#!/usr/bin/env bash
# FlashAttention-3 (fa3-fwd 0.0.3, fp8 and bf16) beside its presets on the H200 machine, in one call:
# builds the Python package, runs scripts/peers/prove_fa3.py on the shipped dump, then scores each
# kernel against its preset (qattn score) and searches for its recipe (qattn fit). Carry peers/wheels
# (scripts/fetch-peers.sh) and wheels/ (the pinned nanobind wheel).
# Usage (from the repository root): bash scripts/peers/prove-fa3-on-h200.sh OUT_DIR
set -euo pipefail
out=${1:?usage: prove-fa3-on-h200.sh OUT_DIR}
dump=datasets/smollm2-135m-2k.h5
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site peers/wheels/fa3_fwd-*.whl wheels/nanobind-2.9.2-py3-none-any.whl
export PYTHONPATH=/tmp/site
rm -rf build-fa3
cmake -S . -B build-fa3 -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_PYTHON="$(command -v python3)" -DQATTN_BUILD_TESTS=OFF \
      -DQATTN_DEVICE_CHECK=OFF -DQATTN_PYTHON_PACKAGE=ON > "$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
cmake --build build-fa3 --parallel > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
export PYTHONPATH="$PWD/build-fa3/python:/tmp/site"
python3 -c "import torch; import qattn; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 -X faulthandler scripts/peers/prove_fa3.py "$dump" "$out"
q=build-fa3/harness/qattn
$q score "$dump" "$out/fa3-fp8.h5" --recipe "preset=fa3-fp8" --output /tmp/fa3-fp8-score --force -q
$q score "$dump" "$out/fa3-bf16.h5" --output /tmp/fa3-bf16-score --force -q
cp /tmp/fa3-fp8-score/summary.md "$out/fa3-fp8-score.md"; cp /tmp/fa3-bf16-score/summary.md "$out/fa3-bf16-score.md"
grep '^| fa3' "$out/fa3-fp8-score.md" "$out/fa3-bf16-score.md" | cut -d'|' -f2-10
# Which recipe each kernel is nearest: from its preset, a bounded search (exit 1 = the rule is not met).
$q fit "$dump" "$out/fa3-fp8.h5" --from "preset=fa3-fp8" --rows 32 --budget "${FIT_BUDGET:-200}" --output /tmp/fa3-fp8-fit --force -q || true
$q fit "$dump" "$out/fa3-bf16.h5" --rows 32 --budget "${FIT_BUDGET:-200}" --output /tmp/fa3-bf16-fit --force -q || true
cp /tmp/fa3-fp8-fit/summary.md "$out/fa3-fp8-fit.md"; cp /tmp/fa3-bf16-fit/summary.md "$out/fa3-bf16-fit.md"
grep -h '^Best' "$out/fa3-fp8-fit.md" "$out/fa3-bf16-fit.md"
