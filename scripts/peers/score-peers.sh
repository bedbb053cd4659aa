#!/usr/bin/env bash
# Scores each peer's outputs (OUT_DIR/<dump>-<kernel>.h5, written by prove-peers-on-h200.sh) on its
# dump against the preset of the kernel's name (preset=fa3-fp8, ...; a kernel named PRESET-decode
# against PRESET), and prints one line per layer:
# kernel vs float64, recipe vs float64, kernel vs recipe, and whether the rule (kernel vs recipe at
# least 30 dB beyond the recipe's own error) holds. Reports go to OUT_DIR/scores/.
# Usage: bash scripts/peers/score-peers.sh OUT_DIR DUMP [DUMP ...]   (QATTN: the qattn binary)
set -euo pipefail
if (($# < 2)); then
  echo "usage: score-peers.sh OUT_DIR DUMP [DUMP ...]" >&2
  exit 2
fi
out=$1
shift
[[ -d $out ]] || { echo "score-peers.sh: $out: no such folder; expected the folder of the peers' outputs" >&2; exit 1; }
for dump in "$@"; do
  [[ -f $dump ]] || { echo "score-peers.sh: $dump: no such file; expected a dump (qattn-dump/1)" >&2; exit 1; }
done
scored=0
qattn=${QATTN:-build/harness/qattn}
# Only a preset's name (or PRESET-decode) after "<dump>-": a dump named synth-d64 must not take
# synth-d64-causal's outputs as a kernel called "causal-...".
presets=$("$qattn" presets --lines | cut -f1)
for dump in "$@"; do
  stem=$(basename "$dump" .h5)
  for outputs in "$out/$stem"-*.h5; do
    [[ -e $outputs ]] || continue
    name=$(basename "$outputs" .h5)
    kernel=${name#"$stem"-}
    # single-row decode outputs of a preset's kernel are named PRESET-decode, unless decode has a
    # preset of its own (llamacpp-f16-cpu-decode); PRESET-tN: that preset run on N threads (split=N)
    extra=""
    if [[ $kernel =~ ^(.*)-t([0-9]+)$ ]] && grep -qxF -- "${BASH_REMATCH[1]}" <<< "$presets"; then
      kernel=${BASH_REMATCH[1]}
      extra=" split=${BASH_REMATCH[2]}"
    fi
    if grep -qxF -- "$kernel" <<< "$presets"; then preset=$kernel
    elif grep -qxF -- "${kernel%-decode}" <<< "$presets"; then preset=${kernel%-decode}
    else continue
    fi
    "$qattn" score "$dump" "$outputs" --recipe "preset=$preset$extra" --output "$out/scores/$name" --force --quiet > /dev/null
    scored=$((scored + 1))
    # layer, kernel vs float64, recipe vs float64, kernel vs recipe, and its margin over the recipe's error
    awk -F'|' -v name="$stem" '$2 !~ /kernel|---/ && NF > 10 {
      printf "%-22s %-18s layer %-4s kernel %6.2f  recipe %6.2f  kernel-vs-recipe %6.2f  margin %6.2f %s\n", name, $2, $3, $7, $9, $10,
             $10 - $9, ($10 - $9 >= 30 ? "(rule met)" : "(short " sprintf("%.2f", 30 - ($10 - $9)) " dB)") }' "$out/scores/$name/summary.md"
  done
done
if ((scored == 0)); then
  echo "score-peers.sh: no outputs of a preset's kernel (<dump>-<preset>.h5) in $out for the dumps given; nothing scored" >&2
  exit 1
fi
