#!/usr/bin/env bash
# On the GPU machine: the decode kernels' short loop. Build (fresh folder), the [decode] tests,
# compute-sanitizer memcheck and racecheck on the fast path's tuning test, the decode benchmark
# (`qattn bench gpu` with a one-row prefill so that the decode rows dominate) at the default split
# and at split 8 (one wave at 4 blocks an SM), and one ncu profile of the fast split kernel (e4m3
# V). Logs go into one archive, OUT_DIR/decode-logs.tgz (a remote runner may return only a few files), and a summary to stdout.
#   bash scripts/gpu-machine-decode.sh OUT_DIR [CUDA_ARCHS]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu-machine-decode.sh OUT_DIR [CUDA_ARCHS]}
archs=${2:-90a}
logs=$(mktemp -d)/decode-logs
mkdir -p "$logs" "$out"
status=0
step() {  # step NAME command...
  local name=$1
  shift
  if "$@" >"$logs/$name.log" 2>&1; then echo "ok   $name"; else echo "FAIL $name (see $name.log in the archive)"; status=1; fi
}
rm -rf build-gpu  # sources copied onto a machine can be older than kept build outputs (gpu-machine.sh)
step configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_GPU=CUDA -DCMAKE_CUDA_ARCHITECTURES="$archs"
step build cmake --build build-gpu --parallel --target test_gpu qattn
step decode-tests build-gpu/tests/test_gpu "[decode]"
tail -3 "$logs/decode-tests.log"
grep -E "\[fast\]" "$logs/decode-tests.log" | sed -E 's/.*kernel vs emulator +([0-9.inf]+) dB.*/\1/' | sort -g | head -1 | sed 's/^/lowest fast-path kernel vs emulator (dB): /'
for tool in memcheck racecheck; do
  step "$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 build-gpu/tests/test_gpu "decode fast: tuning changes no bit"
  grep -E "SUMMARY" "$logs/$tool.log"
done
step bench build-gpu/harness/qattn bench gpu --tokens 1024 --head-dims 64 --reps 20
step bench-split8 build-gpu/harness/qattn bench gpu --tokens 1024 --head-dims 64 --reps 20 --split-k 8
grep -hE "^\| (e4m3|q8_0|q4_0)" "$logs/bench.log" "$logs/bench-split8.log"
if command -v ncu >/dev/null 2>&1; then
  step ncu ncu --clock-control none -k regex:decode_fast_split --launch-count 1 --section SpeedOfLight --section InstructionStats \
    --section WarpStateStats --section Occupancy build-gpu/harness/qattn bench gpu --tokens 1024 --head-dims 64 --reps 1
  grep -E "Duration|DRAM Throughput|Executed Ipc Active|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |Theoretical Occupancy" "$logs/ncu.log"
fi
tar czf "$out/decode-logs.tgz" -C "$(dirname "$logs")" decode-logs
exit $status
