#!/usr/bin/env bash
# The peers that run on the H200 machine, in one call: FlashAttention-3 (fa3-fwd 0.0.3, fp8 and bf16,
# from peers/wheels: scripts/fetch-peers.sh) and SageAttention 2's sm90 kernel (built here from its
# source in peers/SageAttention: github thu-ml/SageAttention at d1a57a5, about four minutes on 16
# cores) on each dump given; their outputs (qattn-outputs/1) go to OUT_DIR, to be scored and fitted
# wherever qattn runs (scripts/peers/score-peers.sh). Carry peers/wheels, peers/SageAttention, the
# dumps and wheels/ (the pinned nanobind wheel). The peers are not part of the project.
# Usage (from the repository root): bash scripts/peers/prove-peers-on-h200.sh OUT_DIR DUMP [DUMP ...]
set -euo pipefail
out=${1:?usage: prove-peers-on-h200.sh OUT_DIR DUMP [DUMP ...]}
shift
[[ $# -gt 0 ]] || { echo "prove-peers-on-h200.sh: no dump given" >&2; exit 2; }
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site peers/wheels/fa3_fwd-*.whl wheels/nanobind-2.9.2-py3-none-any.whl
export PYTHONPATH=/tmp/site
# qattn's Python package (to read dumps and write outputs) builds while SageAttention 2 does.
(cmake -S . -B build-peers -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_PYTHON="$(command -v python3)" -DQATTN_BUILD_TESTS=OFF \
       -DQATTN_DEVICE_CHECK=OFF -DQATTN_PYTHON_PACKAGE=ON && cmake --build build-peers --parallel 8) > "$out/qattn-build.log" 2>&1 &
qattn_build=$!
# A failed SageAttention build must not leave the package's build running behind the script.
trap 'kill "$qattn_build" 2>/dev/null || true' EXIT
start=$(date +%s)
(cd peers/SageAttention && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 setup.py build_ext --inplace) > "$out/sage2-build.log" 2>&1 ||
  { tail -30 "$out/sage2-build.log"; exit 1; }
echo "SageAttention 2 built in $(( $(date +%s) - start )) s"
wait "$qattn_build" || { tail -30 "$out/qattn-build.log"; exit 1; }
export PYTHONPATH="$PWD/build-peers/python:/tmp/site:$PWD/peers/SageAttention:$PWD/scripts/peers"
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
python3 -X faulthandler scripts/peers/prove_fa3.py --out "$out" "$@"
python3 -X faulthandler scripts/peers/prove_sage2.py --out "$out" "$@"
