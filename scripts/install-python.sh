#!/usr/bin/env bash
# Installs the Python package qattn, built by CMake into BUILD/python/qattn, into the project's
# virtual environments (.venv, and .venv-dump when installed): a qattn.pth in its site-packages names BUILD/python, so
# `.venv/bin/python -c "import qattn"` works from any folder and picks up every rebuild.
# Usage: scripts/install-python.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
pkg="$(cd "$build" && pwd)/python"
if ! ls "$pkg"/qattn/_core*.so >/dev/null 2>&1; then
  echo "install-python: $pkg/qattn has no built module (_core*.so); build first: cmake --build $build" >&2
  exit 1
fi
# Also into the dumper's environment (.venv-dump, same interpreter) when it exists: qattn.model_eval
# runs there, beside torch and transformers.
for venv in .venv .venv-dump; do
  [[ -x $venv/bin/python ]] || continue
  site=$($venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$pkg" > "$site/qattn.pth.tmp"
  mv "$site/qattn.pth.tmp" "$site/qattn.pth"
  (cd / && "$OLDPWD/$venv/bin/python" -c "import qattn, sys; print('install-python: $venv: import qattn ->', qattn.__file__)")
done
