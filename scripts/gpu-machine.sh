#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04 with CUDA; nothing is installed): configure, build, run the
# gpu-labelled tests and compute-sanitizer's memcheck and racecheck, then the benchmarks (PyTorch
# SDPA and SageAttention 1 with python3 + torch, then `qattn bench gpu` beside them), writing logs
# into LOG_DIR. The peers' wheels come from peers/wheels (scripts/fetch-peers.sh, run where there is
# a network; carry peers/ to the machine), installed into a temporary folder on PYTHONPATH.
#   bash scripts/gpu-machine.sh LOG_DIR [CUDA_ARCHS]        (PYTHON=... to use another interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:?usage: gpu-machine.sh LOG_DIR [CUDA_ARCHS]}
archs=${2:-90a}  # 90a: the wgmma code (plain 90 compiles none of it)
mkdir -p "$logs"
status=0
step() {  # step NAME command...
  local name=$1
  shift
  if "$@" >"$logs/$name.log" 2>&1; then echo "ok   $name"; else echo "FAIL $name (see $logs/$name.log)"; status=1; fi
}
# A fresh build folder every time: sources copied onto a machine can be older than build outputs
# kept there from an earlier run, and ninja would then keep the old objects (seen on the H200).
rm -rf build-gpu
step configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES="$archs"
step build cmake --build build-gpu --parallel
step gpu-tests ctest --test-dir build-gpu -L gpu --output-on-failure -V
rm -f "$logs/sdpa.json" "$logs/bench-gpu.md"  # never report a previous run's numbers
if compgen -G "peers/wheels/*.whl" >/dev/null; then
  peers_site=$(mktemp -d)
  step install-peers "${PYTHON:-python3}" -m pip install --quiet --no-index --no-deps --target "$peers_site" peers/wheels/*.whl
  export PYTHONPATH="$peers_site${PYTHONPATH:+:$PYTHONPATH}"
fi
step bench-sdpa "${PYTHON:-python3}" scripts/bench_sdpa.py --out "$logs/sdpa.json"
sdpa_args=()
if [[ -f "$logs/sdpa.json" ]]; then sdpa_args=(--sdpa "$logs/sdpa.json"); fi
step bench-gpu build-gpu/harness/qattn bench gpu "${sdpa_args[@]}" --out "$logs/bench-gpu.md"
# The sanitizers on a representative set: each family's tuning test (ragged N, causal, GQA).
sanitized="dot4 kernel: tuning changes no bit,integer softmax kernels: tuning changes no bit,mma kernel: tuning changes no bit,decode: tuning changes no bit,decode fast: tuning changes no bit,wgmma kernel: per-tile and into-O accumulation agree bit for bit on one key tile"
step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/test_gpu "$sanitized"
step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 build-gpu/tests/test_gpu "$sanitized"
grep -hE "seed|dB" "$logs/gpu-tests.log" || true
if [[ -f "$logs/bench-gpu.md" ]]; then echo; cat "$logs/bench-gpu.md"; fi
exit $status
