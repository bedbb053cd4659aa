#!/usr/bin/env bash
# On the GPU machine: the end-to-end evaluation with the GPU kernels beside the emulator, on one
# machine. That machine has torch and transformers but neither nanobind, gguf nor the models' PyPI
# packages: pass a folder with the nanobind and gguf wheels, the model's GGUF file, and the text as a
# UTF-8 file (for the default text: `python3 -c "import sys; sys.path.insert(0, 'python/qattn');
# import models; open('text.txt', 'w').write(models.prose_text()[0])"` on Debian 12).
# Runs EXPERIMENT twice (backend gpu, then emulate; weights, text and threads replaced), and compares
# their rows: a GPU family that is bit-equal to the emulator must give identical rows.
#   bash scripts/gpu-machine-model-eval.sh WHEEL_DIR GGUF TEXT EXPERIMENT LOG_DIR [CUDA_ARCHS]
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: gpu-machine-model-eval.sh WHEEL_DIR GGUF TEXT EXPERIMENT LOG_DIR [CUDA_ARCHS]"
wheels=${1:?$usage} gguf=${2:?$usage} text=${3:?$usage} experiment=${4:?$usage} logs=${5:?$usage}
archs=${6:-90}
mkdir -p "$logs"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/nanobind-*.whl "$wheels"/gguf-*.whl || exit 1
export PYTHONPATH="$site"
cmake -S . -B build-gpu-python -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_PYTHON="$(command -v python3)" -DQATTN_GPU=CUDA \
      -DCMAKE_CUDA_ARCHITECTURES="$archs" -DQATTN_DEVICE_CHECK=OFF -DQATTN_PYTHON_PACKAGE=ON > "$logs/configure.log" 2>&1 \
  || { tail -20 "$logs/configure.log"; exit 1; }
cmake --build build-gpu-python --parallel --target qattn_python_stub > "$logs/build.log" 2>&1 || { tail -30 "$logs/build.log"; exit 1; }
export PYTHONPATH="$PWD/build-gpu-python/python:$site" QATTN_SOURCE_DIR="$PWD"
python3 - "$gguf" "$text" "$experiment" "$logs" <<'PY'
import json, subprocess, sys, time
gguf, text, path, logs = sys.argv[1:]
base = json.load(open(path))
rows = {}
for backend in ("gpu", "emulate"):
    e = dict(base, backend=backend, weights=gguf, text=text, threads=16, output=f"/tmp/model-eval-{backend}")
    f = f"/tmp/model-eval-{backend}.json"
    json.dump(e, open(f, "w"))
    t0 = time.time()
    with open(f"{logs}/{backend}.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "qattn.model_eval", f, "--force"], stdout=log, stderr=subprocess.STDOUT)
    print(f"backend {backend}: exit {rc}, {time.time() - t0:.0f} s")
    if rc:
        sys.exit(rc)
    rows[backend] = [json.loads(l) for l in open(f"/tmp/model-eval-{backend}/results.jsonl")]
    subprocess.call(["cp", f"/tmp/model-eval-{backend}/summary.md", f"{logs}/{backend}-summary.md"])
keys = ("ppl", "kl_mean", "kl_p99", "top1_agree")
print("| recipe | context | backend gpu: PPL, KL mean | emulate: PPL, KL mean | identical |")
print("|---|---:|---|---|---|")
for g, m in zip(rows["gpu"], rows["emulate"]):
    same = all(g[k] == m[k] for k in keys)
    print(f"| {g['recipe']} | {g['context']} | {g['ppl']:.6f}, {g['kl_mean']:.3e} | {m['ppl']:.6f}, {m['kl_mean']:.3e} | {same} |")
PY
