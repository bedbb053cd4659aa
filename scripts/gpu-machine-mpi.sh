#!/usr/bin/env bash
# On a GPU machine with Open MPI: the quickstart sweep with --backend gpu as one process and under
# mpirun -n RANKS (ranks take the node's GPUs in order; on one GPU they share it), the wall times,
# and whether the sharded report equals the single-process one file for file.
#   bash scripts/gpu-machine-mpi.sh LOG_DIR [RANKS] [QATTN_EXE]   (default 2, build-gpu/harness/qattn)
set -u
cd "$(dirname "$0")/.."
logs=${1:?usage: gpu-machine-mpi.sh LOG_DIR [RANKS] [QATTN_EXE]}
ranks=${2:-2}
q=${3:-build-gpu/harness/qattn}
mkdir -p "$logs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for out in one sharded; do
  rm -rf "${logs:?}/$out"
  python3 -c "import json, sys; e = json.load(open('experiments/quickstart.json')); e['output'] = sys.argv[1]; json.dump(e, open(sys.argv[1] + '.json', 'w'))" "$logs/$out"
done
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
t0=$(date +%s.%N)
"$q" run "$logs/one.json" --backend gpu --quiet >"$logs/one.log" 2>&1
echo "one process: rc=$? $(elapsed "$t0") s"
t0=$(date +%s.%N)
mpirun -n "$ranks" "$q" run "$logs/sharded.json" --backend gpu >"$logs/sharded.log" 2>&1
echo "mpirun -n $ranks: rc=$? $(elapsed "$t0") s"
grep -h 'GPU\|merged' "$logs/sharded.log"
status=0
for f in results.jsonl stats.jsonl not_covered.jsonl failed.jsonl results.csv summary.md figures/channel_outliers.csv; do
  if [[ ! -e $logs/one/$f && ! -e $logs/sharded/$f ]]; then continue; fi
  if cmp -s "$logs/one/$f" "$logs/sharded/$f"; then echo "same $f"; else echo "DIFF $f"; status=1; fi
done
exit $status
