#!/usr/bin/env bash
# `qattn inspect` on the shipped SmolLM2 dump prints its summary: model, shape, layers and one K
# outlier line per layer.
set -u
qattn=$1 file=$2
out=$("$qattn" inspect "$file" 2>&1) || { echo "inspect failed:"; echo "$out"; exit 1; }
echo "$out"
fail=0
for pattern in 'model       "SmolLM2-135M-Instruct"' 'weights     "GGUF Q4_1' 'tokens      2048 \(token ids stored\)' \
               'layers      5 \(0 \.\. 29\)' 'heads       9 query, 3 KV \(GQA group 3\)' 'head dim    64' 'dtype       fp16' \
               'text_source = "/usr/lib/python3.11/pydoc_data/topics.py'; do
  grep -qE -- "$pattern" <<<"$out" || { echo "FAIL: missing /$pattern/"; fail=1; }
done
for layer in 0 7 15 22 29; do
  grep -qE "^ +$layer +yes +0 +0.125 +[0-9.]+x  " <<<"$out" || { echo "FAIL: no outlier line for layer $layer"; fail=1; }
done
exit $fail
