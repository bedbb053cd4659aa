"""The Python package on a GPU machine (ctest label gpu; CUDA build with the package).

gpu_run through the bindings must give the emulator's bits, and qattn.score must score a torch
function running on the GPU exactly as `qattn score` scores the same outputs from a file.
"""
import json
import os
import subprocess

import numpy as np
import pytest

import qattn

ROOT = os.environ.get("QATTN_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
DUMP = os.path.join(ROOT, "datasets", "smollm2-135m-2k.h5")

# One recipe per GPU family, with the family's contract from its C++ tests (tests/gpu): flash_dot4 and
# flash_integer give the emulator's bits; flash_mma and flash_wgmma (sm_90a) sum in the tensor cores' own order, so it is held
# to kernel-vs-emulator error at least 30 dB below the recipe's own error against float64.
RECIPES = [
    ("q=int8/token k=int8/token p=e4m3/static:448 v=e4m3/channel acc.qk=exact acc.pv=h200_e4m3_mma", "flash_mma", False),
    ("q=int8/token k=int8/token p=e4m3/static:448 v=e4m3/channel acc.qk=exact acc.pv=h200_e4m3_wgmma_tile", "flash_wgmma", False),
    ("q=fp16 k=fp16 p=fp16 v=fp16 acc.qk=h200_hmma acc.pv=h200_hmma_tile", "flash_wgmma", False),
    ("q=bf16 k=bf16 p=bf16 v=bf16 acc.qk=h200_wgmma_bf16 acc.pv=h200_wgmma_bf16_tile", "flash_wgmma", False),
    ("q=int8/token k=int8/token ksmooth=global p=int8/static:127 v=int8/channel", "flash_dot4", True),
    ("preset=qflash-lab", "flash_integer", True),
    ("q=bf16 k=bf16 p=bf16 v=bf16 acc.pv=fp32", "flash_dot4/float", True),
]


def test_the_build_has_gpu_kernels():
    assert qattn.gpu_available(), "this test needs the CUDA build of the package (-DQATTN_GPU=CUDA)"


@pytest.mark.parametrize("recipe,family,bits", RECIPES)
def test_gpu_run_keeps_each_familys_contract_with_the_emulator(recipe, family, bits):
    d = qattn.load_layer(DUMP, "7", tokens=640)
    kw = dict(causal=d["causal"], window=d["window"], softmax_scale=d["softmax_scale"])
    assert qattn.gpu_not_covered(d["q"], d["k"], d["v"], recipe, **kw) == ""
    for rows in (None, (300, 640), "sample:64:3"):
        g = qattn.gpu_run(d["q"], d["k"], d["v"], recipe, rows=rows, **kw)
        e = qattn.emulate(d["q"], d["k"], d["v"], recipe, rows=rows, **kw)
        assert np.array_equal(g["rows"], e["rows"])
        assert g["out"].shape == e["out"].shape and g["kernel"] == family
        if bits:
            differ = int(np.sum(g["out"].view(np.uint32) != e["out"].view(np.uint32)))
            assert differ == 0, f"{recipe} on {family}: {differ} of {g['out'].size} outputs differ from the emulator"
        else:
            ref = qattn.reference(d["q"], d["k"], d["v"], rows=rows, **kw)["out"]
            format_db = qattn.compare(ref, e["out"])["sqnr_db"]
            kernel_db = qattn.compare(e["out"], g["out"])["sqnr_db"]
            assert kernel_db > format_db + 30, (recipe, rows, format_db, kernel_db)


def test_score_of_a_torch_function_on_the_gpu_matches_the_cli(tmp_path):
    torch = pytest.importorskip("torch")
    assert torch.cuda.is_available()

    def sdpa_fp16(q, k, v, *, causal, window, softmax_scale):
        assert q.is_cuda and q.dtype == torch.float16 and not window
        g = q.shape[0] // k.shape[0]
        k, v = (x.repeat_interleave(g, dim=0) for x in (k, v))
        return torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal,
                                                                scale=softmax_scale)[0]

    recipe = "q=fp16 k=fp16 p=fp16 v=fp16 acc.pv=fp32"
    rows = qattn.score(sdpa_fp16, DUMP, layers=["0", "15"], contexts=[512, 2048], recipe=recipe, tensor="torch",
                       device="cuda", dtype="float16", output=str(tmp_path / "py"))
    assert len(rows) == 2 * 2 * 9
    # fp16 inputs, fp16 P and output, fp32 sums: ~2^-11 relative error per rounding, about 60 dB.
    assert min(r["sqnr_db"] for r in rows) > 50, rows
    outputs = sorted(os.path.join(tmp_path, "py", "outputs", f) for f in os.listdir(tmp_path / "py" / "outputs"))
    exe = os.environ["QATTN_EXE"]
    subprocess.run([exe, "score", DUMP, *outputs, "--recipe", recipe, "-o", str(tmp_path / "cli"), "--quiet"], check=True)
    with open(tmp_path / "cli" / "results.jsonl") as f:
        cli = [json.loads(line) for line in f]
    keys = ("layer", "context", "head", "sqnr_db", "recipe_sqnr_db", "kernel_vs_recipe_sqnr_db", "kernel_equal_recipe")
    # The CLI orders its rows by outputs file name (context 2048 before 512): compare as sorted lists.
    assert sorted(tuple(r[k] for k in keys) for r in rows) == sorted(tuple(r[k] for k in keys) for r in cli)
