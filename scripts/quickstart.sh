#!/usr/bin/env bash
# Installs, builds and runs the quickstart experiment (experiments/quickstart.json) on the shipped
# SmolLM2 dump: prints its summary table and where the report and figures are. Also builds the Python
# package qattn and installs it into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${QATTN_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --parallel --target qattn qattn_python_stub
bash scripts/install-python.sh "$build"   # import qattn from .venv
"$build/harness/qattn" run experiments/quickstart.json --force
