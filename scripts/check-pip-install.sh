#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment, then the package used from outside the clone:
# its version, a computation, and a score report whose figures the installed package draws with its
# own scripts and interpreter. The system libraries come from scripts/install-deps.sh.
#   bash scripts/check-pip-install.sh        (CI runs it: .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash scripts/install-deps.sh >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv "$work/venv"
start=$SECONDS
"$work/venv/bin/pip" install --disable-pip-version-check -q "$root"
echo "check-pip-install: pip install . took $((SECONDS - start)) s"
cd "$work"
"$work/venv/bin/python" - "$root/datasets/smollm2-135m-2k.h5" <<'PY'
import os, sys
import numpy as np
import qattn
dump = sys.argv[1]
assert qattn.__file__.startswith(sys.prefix), f"qattn imported from {qattn.__file__}, not the environment"
d = qattn.load_layer(dump, 15, tokens=128)
kw = dict(causal=d["causal"], window=d["window"], softmax_scale=d["softmax_scale"])
ref = qattn.reference(d["q"], d["k"], d["v"], **kw)
emu = qattn.emulate(d["q"], d["k"], d["v"], "q=int8/token k=int8/token", **kw)
db = qattn.compare(ref["out"], emu["out"])["sqnr_db"]
rows = qattn.score(lambda q, k, v, **kw: qattn.emulate(q, k, v, "q=int8/token k=int8/token", **kw)["out"], dump,
                   layers=[15], contexts=[128], recipe="q=int8/token k=int8/token", output="rep")
assert os.path.exists("rep/figures/score_per_head.png"), "the installed package drew no figure"
assert all(r["kernel_vs_recipe_sqnr_db"] == "inf" for r in rows)
print(f"check-pip-install: qattn {qattn.__version__} from {os.path.dirname(qattn.__file__)}: int8 Q/K at 128 tokens {db:.2f} dB; "
      f"score report with figures")
PY
# The `qattn` command the package installs: the C++ program it carries, drawing figures with the
# package's interpreter and scripts (the build's paths are gone with pip's build folder).
"$work/venv/bin/qattn" --version
outputs=(rep/outputs/*.h5)
"$work/venv/bin/qattn" score "$root/datasets/smollm2-135m-2k.h5" "${outputs[@]}" -o rep-cli --quiet
test -f rep-cli/figures/score_per_head.png || { echo "check-pip-install: the qattn command drew no figure" >&2; exit 1; }
echo "check-pip-install: the qattn command ($("$work/venv/bin/qattn" --version)) scored and drew figures"
