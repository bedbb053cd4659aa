#!/usr/bin/env bash
# The peer proofs on the H200 machine, in one call: builds qattn (CPU build and the Python package),
# then runs QFlash's published kernel (peers/qflash/kernel.py: github EfficientCompLab/qflash at
# 46adca5) and SageAttention 1.0.6 (peers/sageattention-1.0.6-py3-none-any.whl) beside the lab's
# presets. The peers are not part of the project: put them in peers/ (ignored) and carry it.
# Usage (from the repository root): bash scripts/peers/prove-on-h200.sh OUT_DIR
set -euo pipefail
out=${1:?usage: prove-on-h200.sh OUT_DIR}
mkdir -p "$out" /tmp/proof
# nanobind pinned as the project pins it (peers/ also carries its wheel; the machine's own may differ).
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site peers/sageattention-1.0.6-py3-none-any.whl \
        peers/nanobind-2.9.2-py3-none-any.whl
export PYTHONPATH=/tmp/site
py=$(command -v python3)
rm -rf build-h200
cmake -S . -B build-h200 -G Ninja -DCMAKE_BUILD_TYPE=Release -DQATTN_PYTHON="$py" -DQATTN_BUILD_TESTS=OFF \
      -DQATTN_DEVICE_CHECK=OFF -DQATTN_PYTHON_PACKAGE=ON > "$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
cmake --build build-h200 --parallel > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
export PYTHONPATH="$PWD/build-h200/python:/tmp/site"
python3 -X faulthandler -c "import qattn; print('qattn package:', qattn.__file__, qattn.Recipe('q=bf16').to_json()['q'])"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 scripts/peers/capture_qflash.py --kernel peers/qflash/kernel.py --out /tmp/proof/qflash > "$out/qflash-capture.log"
# QFlash: every case scored by qattn score against the preset (bit-equal counts in the summary).
for dump in /tmp/proof/qflash/*.h5; do
  case $dump in *-qflash.h5) continue ;; esac
  name=$(basename "$dump" .h5)
  build-h200/harness/qattn score "$dump" "/tmp/proof/qflash/$name-qflash.h5" --recipe "preset=qflash-46adca5" \
      --output "/tmp/proof/qflash-reports/$name" --force --quiet > /dev/null
  echo "$name $(grep '^| qflash' "/tmp/proof/qflash-reports/$name/summary.md" | cut -d'|' -f4-11)"
done | tee "$out/qflash-proof.md"
python3 -X faulthandler scripts/peers/score_sageattention.py --peer /tmp/site --qattn build-h200/harness/qattn --recipe "preset=sageattn-1.0.6" \
        --out /tmp/proof/sage | tee "$out/sage-proof.md"
# QFlash's captured outputs compared through the Python package.
python3 -X faulthandler scripts/peers/compare_qflash.py /tmp/proof/qflash > "$out/qflash-python.md" 2>&1 || echo "compare_qflash.py (Python package) exited $?"
(cd /tmp/proof && tar czf "$out/proof-data.tgz" qflash qflash-reports sage/*-report)
