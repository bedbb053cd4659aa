#!/usr/bin/env bash
# Installs everything qattn needs on Debian 12 (or Ubuntu 24.04), idempotently:
# the C++ toolchain and libraries from the distribution, and a pinned Python
# virtual environment (.venv): the cross-checks, the figures, and nanobind + pytest for the Python package.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(
  cmake ninja-build g++ pkg-config
  libeigen3-dev libhdf5-dev zlib1g-dev nlohmann-json3-dev catch2 libcli11-dev libfmt-dev
  libopenmpi-dev openmpi-bin  # sharded runs: mpirun -n R qattn run (optional to the build, tested in CI)
  python3 python3-venv python3-pip python3-dev
)
# The HIP build (QATTN_GPU=HIP, compile only; cmake/HipToolchain.cmake) uses Debian 12's HIP 5.2 with
# clang-15; llvm-15 provides llvm-as-15/llvm-dis-15, which make the gfx1100 bitcode Debian lacks.
if [[ -r /etc/os-release ]] && (. /etc/os-release && [[ $ID == debian && $VERSION_ID == 12 ]]); then
  debs+=(hipcc libamdhip64-dev rocm-device-libs clang-15 llvm-15)
fi

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

# Python: Debian's interpreter in a venv, so the pins below are the versions tested.
py_pins=(numpy==2.2.6 ml_dtypes==0.5.3 matplotlib==3.10.1 nanobind==2.9.2 pytest==8.3.5)
if [[ ! -x .venv/bin/python ]]; then
  /usr/bin/python3 -m venv .venv
fi
if ! .venv/bin/python scripts/pins_installed.py "${py_pins[@]}"; then
  echo "install-deps: installing ${py_pins[*]} into .venv"
  .venv/bin/pip install -q --disable-pip-version-check "${py_pins[@]}"
else
  echo "install-deps: Python pins present in .venv"
fi
