#!/usr/bin/env bash
# The end-to-end evaluation from a fresh clone: installs the dumper's environment (torch,
# transformers, the models' weights) and the lab's dependencies, builds the Python package, then runs
# `python -m qattn.model_eval EXPERIMENT [--force] [--quiet]` in that environment.
#   bash scripts/model-eval.sh experiments/model-eval/smollm2-quick.json
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: scripts/model-eval.sh EXPERIMENT.json [--force] [--quiet]" >&2; exit 2; }
bash scripts/install-dumper.sh >/dev/null   # also runs install-deps.sh
build=${QATTN_BUILD_DIR:-build}
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --parallel --target qattn_python_stub >/dev/null
bash scripts/install-python.sh "$build" >/dev/null
exec .venv-dump/bin/python -m qattn.model_eval "$@"
