#!/usr/bin/env bash
# Regenerates the real-model Q/K/V dumps. Installs the dumper's pinned environment first.
#   bash scripts/make-dumps.sh shipped   -> datasets/smollm2-135m-2k.h5 (the lab's embedded default)
#   bash scripts/make-dumps.sh long      -> datasets/generated/smollm2-135m-8k.h5 and gemma3-270m-32k.h5
#   bash scripts/make-dumps.sh gemma32k  -> datasets/generated/gemma3-270m-32k.h5 only
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-dumper.sh
dump=(.venv-dump/bin/python datasets/dump/dump_qkv.py)
case "${1:-}" in
  shipped)
    # First, last, middle and two between, of SmolLM2's 30 layers; every query row checked.
    "${dump[@]}" --model smollm2 --tokens 2048 --layers 0,7,15,22,29 --dtype fp16 --out datasets/smollm2-135m-2k.h5 ;;
  long)
    "${dump[@]}" --model smollm2 --tokens 8192 --layers all --dtype fp16 --check-rows 512 --out datasets/generated/smollm2-135m-8k.h5
    "${dump[@]}" --model gemma3 --tokens 32768 --layers all --dtype fp16 --check-rows 256 --out datasets/generated/gemma3-270m-32k.h5 ;;
  gemma32k)
    "${dump[@]}" --model gemma3 --tokens 32768 --layers all --dtype fp16 --check-rows 256 --out datasets/generated/gemma3-270m-32k.h5 ;;
  *)
    echo "usage: bash scripts/make-dumps.sh shipped|long|gemma32k" >&2
    exit 2 ;;
esac
