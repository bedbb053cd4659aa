#!/usr/bin/env bash
# Mutation fuzzer for the qattn CLI (tests/fuzz/fuzz.py; Python 3 standard library only).
#
#   bash scripts/fuzz.sh [QATTN_EXE] [--mutations N] [--seed S] [--out DIR] [fuzz.py options...]
#
#   QATTN_EXE     the qattn binary (default: build/harness/qattn); copied to OUT/work/qattn first so a
#                 rebuild during the run does not change it (--no-copy-exe to run it in place)
#   --mutations N number of trials, each one mutated input run once (default 10000)
#   --seed S      the run is deterministic for a given seed (default 1); trial i uses Random("S:i")
#   --out DIR     results (default ${TMPDIR:-/tmp}/qattn-fuzz; emptied first): findings.jsonl (one JSON
#                 line per finding), repro/<id>/cmd.sh + inputs (and <id>-min/: a minimized one per
#                 distinct class), summary.json; the summary table is printed to stderr at the end
#   other options go to fuzz.py: --jobs J (parallel trials, default 1), --timeout SEC (per trial,
#   default 20), --targets exp,bounds,recipe,h5, --weights, --mem-mb MB (RLIMIT_AS of each trial,
#   default 4096), --no-minimize, --max-repro-per-class K, --corpus DIR, --h5py PYTHON
#
# Targets: experiment files -> qattn run (also --resume / --force), bounds files -> qattn check,
# one-line recipes -> qattn eval --json, HDF5 dumps -> qattn inspect / eval / run, a kernel's
# outputs file -> qattn score. Seeds are in
# tests/fuzz/corpus. Classes: crash (signal, exit code not 0/1/2, 'terminate called', sanitizer
# text), hang (past the timeout), nan (exit 0 with NaN/inf printed as a number in stdout or the
# report), unclear (an error that names neither the input file nor a field, or shows internal text
# such as json.exception / std:: / stoll). The exact heuristics are in fuzz.py's docstring.
# Exit status: 0 when the run completed (findings or not), 2 on a usage error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exe="$root/build/harness/qattn"
if [[ $# -gt 0 && "$1" != -* ]]; then
  exe="$1"
  shift
fi
exec python3 "$root/tests/fuzz/fuzz.py" --exe "$exe" "$@"
