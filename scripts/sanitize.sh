#!/usr/bin/env bash
# The CPU test suite and a fuzz run under AddressSanitizer + UndefinedBehaviorSanitizer:
#   bash scripts/sanitize.sh [FUZZ_MUTATIONS]      (default 2000; 0 = tests only)
# Builds build-asan (QATTN_SANITIZE=ON, the Python package too), runs every ctest test that needs
# neither a GPU nor the models (the Python ones with the sanitizers' runtimes preloaded into the
# interpreter, which is not instrumented), then scripts/fuzz.sh against the instrumented binary and
# module (any sanitizer report is a crash).
set -euo pipefail
cd "$(dirname "$0")/.."
mutations=${1:-2000}
bash scripts/install-deps.sh >/dev/null
build=build-asan
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQATTN_SANITIZE=ON -DQATTN_PYTHON_PACKAGE=ON -DQATTN_DEVICE_CHECK=OFF >/dev/null
cmake --build "$build" --parallel
# Leaks: the CLI exits through std::exit paths that keep static state; detect_leaks=0 keeps the
# reports to memory errors. Every UB report aborts (halt_on_error).
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The interpreter is not instrumented: the runtimes are preloaded for the tests that import the
# module (labelled python), and only for them.
preload="$(g++ -print-file-name=libasan.so):$(g++ -print-file-name=libubsan.so)"
status=0
ctest --test-dir "$build" --output-on-failure --label-exclude "gpu|model|python" --parallel 2 || status=$?
LD_PRELOAD="$preload" ctest --test-dir "$build" --output-on-failure --label-regex python --label-exclude "gpu|model" --parallel 2 || status=$?
if ((mutations > 0)); then
  # ASan reserves terabytes of address space: no RLIMIT_AS on the trials (--mem-mb 0).
  out="${TMPDIR:-/tmp}/qattn-fuzz-asan"
  bash scripts/fuzz.sh "$build/harness/qattn" --mutations "$mutations" --seed 3 --jobs 2 --mem-mb 0 --out "$out" \
    --python-preload "$preload" --py-no-mid-views || status=$?
  # fuzz.sh exits 0 whatever it found: the verdict reads its summary.
  python3 - "$out/summary.json" <<'PY' || status=1
import json, sys
s = json.load(open(sys.argv[1]))
bad = {k: sum(t.get(k, 0) for t in s["targets"].values()) for k in ("crash", "hang", "nan", "lost", "unclear")}
print("sanitize.sh: fuzz under ASan + UBSan:", bad)
sys.exit(1 if any(bad.values()) else 0)
PY
fi
echo "sanitize.sh: $( ((status == 0)) && echo PASS || echo FAIL ) (tests under ASan + UBSan; fuzz findings in ${TMPDIR:-/tmp}/qattn-fuzz-asan/summary.json)"
exit $status
