#!/usr/bin/env bash
# The README's test command: installs what is missing (the lab's dependencies and the dumper's
# environment, which the end-to-end evaluation's tests use), configures, builds, and runs every test
# that needs no GPU, two at a time; the verdict is the last line. The GPU builds' compile check is
# scripts/compile-gpu.sh (CI runs both: .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash scripts/install-deps.sh
bash scripts/install-dumper.sh   # torch + transformers + the models: the end-to-end evaluation's tests
build=${QATTN_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --parallel
bash scripts/install-python.sh "$build"   # import qattn from .venv
status=0
ctest --test-dir "$build" --output-on-failure --label-exclude gpu --parallel 2 || status=$?
if ((status == 0)); then
  echo "test.sh: PASS: every CPU test passed ($((SECONDS - start)) s in all)"
else
  failed=$(sed 's/^[0-9]*://' "$build/Testing/Temporary/LastTestsFailed.log" 2>/dev/null | tr '\n' ' ' || true)
  echo "test.sh: FAIL: ${failed:-ctest exited $status} (their output is above)"
fi
exit $status
