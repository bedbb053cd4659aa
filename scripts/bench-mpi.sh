#!/usr/bin/env bash
# Scaling of a sharded sweep (benchmark, not a test): one synthetic sweep run as one process (its
# OpenMP threads on every core), then under mpirun with 1 and 2 ranks (Open MPI binds each rank to a
# core, so a rank's OpenMP threads use that core), and the merge's cost (rank 0 prints it).
#   bash scripts/bench-mpi.sh [QATTN_EXE] [RANKS_MAX]     (default build/harness/qattn, 2)
# Prints one line per run: wall seconds, speed-up over 1 rank and parallel efficiency.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
qattn=${1:-$root/build/harness/qattn}
max=${2:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$qattn" synth --out "$tmp/d.h5" --tokens 2048 --dim 64 --q-heads 8 --kv-heads 2 --layers 4 >/dev/null
cat > "$tmp/e.json" <<JSON
{"name": "bench-mpi", "dataset": "$tmp/d.h5", "selection": {"layers": "all", "contexts": [512, 1024, 2048], "rows": 256},
 "kl_rows": 16, "output": "$tmp/r",
 "recipes": {"fp16": "q=fp16 k=fp16 p=fp16 v=fp16", "bf16": "q=bf16 k=bf16 p=bf16 v=bf16",
             "int8 QK": "q=int8/token k=int8/token acc.qk=exact",
             "int8 QK + e4m3 PV": "q=int8/token k=int8/token p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_mma"},
 "statistics": {"p_formats": ["int8/static:127"]}}
JSON
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >"$tmp/out" 2>"$tmp/err"; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'; }
echo "bench-mpi: $(nproc) cores, $(mpirun --version | head -1), $("$qattn" --version)"
rm -rf "$tmp/r"
t=$(seconds "$qattn" run "$tmp/e.json" --quiet)
printf 'one process (OpenMP on %d cores): %6.1f s\n' "$(nproc)" "$t"
cp "$tmp/r/results.jsonl" "$tmp/single.jsonl"
t1=
for n in $(seq 1 "$max"); do
  rm -rf "$tmp/r"
  t=$(seconds mpirun -n "$n" "$qattn" run "$tmp/e.json")
  cmp -s "$tmp/r/results.jsonl" "$tmp/single.jsonl" || { echo "bench-mpi: the $n-rank report differs from one process's" >&2; exit 1; }
  [[ -n $t1 ]] || t1=$t
  merge=$(grep -o 'in [0-9.]* s$' "$tmp/err" | tail -1 || true)
  awk -v n="$n" -v t="$t" -v t1="$t1" -v m="${merge:-none}" \
    'BEGIN { printf "mpirun -n %d: %6.1f s  speed-up %.2f  efficiency %.2f  (merge %s)\n", n, t, t1 / t, t1 / (t * n), m }'
done
