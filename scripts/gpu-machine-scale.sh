#!/usr/bin/env bash
# On the GPU machine: the dumper at scale. Two checkpoints shaped like Llama 3.1 8B and DeepSeek-V2-Lite
# (datasets/dump/shaped_checkpoint.py: configuration and tokenizer only) get random bf16 weights on
# the GPU and are dumped at 32768 tokens for four layers each (float64 check on 256 rows a layer),
# then one experiment runs on each dump with sampled rows. Wall time and peak host memory from
# /usr/bin/time -v where it exists, peak GPU memory from the dumper. Needs the dumper's Python
# packages (torch, transformers 4.57, h5py) and a built qattn (QATTN=path/to/qattn).
#   bash scripts/gpu-machine-scale.sh LOG_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:?usage: gpu-machine-scale.sh LOG_DIR}
py=${PYTHON:-python3}
qattn=${QATTN:-build/harness/qattn}
mkdir -p "$logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat README.md docs/*.md > "$work/text.txt"  # ~52k word-level tokens of the lab's own prose
timed=()
if [[ -x /usr/bin/time ]]; then timed=(/usr/bin/time -v); fi
status=0
for spec in "llama3-8b 0,10,21,31" "deepseek-v2-lite 0,1,13,26"; do
  read -r shape layers <<<"$spec"
  "$py" datasets/dump/shaped_checkpoint.py "$shape" "$work/$shape" "$work/text.txt" || { status=1; continue; }
  start=$(date +%s)
  if ! "${timed[@]}" "$py" datasets/dump/dump_qkv.py --model "$work/$shape" --random-weights 0 --device cuda --compute bf16 --tokens 32768 \
      --layers "$layers" --check-rows 256 --threads 16 --text "$work/text.txt" --out "$work/$shape.h5" >"$logs/dump-$shape.log" 2>&1; then
    echo "FAIL dump $shape"; tail -20 "$logs/dump-$shape.log"; status=1; continue
  fi
  echo "dump $shape: $(( $(date +%s) - start )) s wall"; grep -E "^wrote|Maximum resident|Elapsed" "$logs/dump-$shape.log"
  "$qattn" inspect "$work/$shape.h5" | head -12
  cat >"$work/$shape.json" <<JSON
{"name": "$shape at 32768 tokens", "dataset": "$work/$shape.h5", "seed": 1, "output": "$work/$shape-report",
 "selection": {"layers": [${layers}], "contexts": [32768], "rows": 256},
 "recipes": {"bf16": "q=bf16 k=bf16 v=bf16 p=bf16", "int8 + e4m3": "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel"}}
JSON
  start=$(date +%s)
  if "$qattn" run "$work/$shape.json" -q >"$logs/run-$shape.log" 2>&1; then
    echo "qattn run $shape (4 layers, 256 sampled rows a head, 2 recipes): $(( $(date +%s) - start )) s"
    cp "$work/$shape-report/summary.md" "$logs/summary-$shape.md"
  else
    echo "FAIL qattn run $shape"; tail -20 "$logs/run-$shape.log"; status=1
  fi
done
exit $status
