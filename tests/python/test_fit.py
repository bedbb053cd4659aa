"""qattn fit / qattn.fit on recorded outputs of real kernels (tests/data): from a generic recipe the
search recovers a recipe that meets the lab's rule for QFlash (46adca5) and SageAttention 1.0.6,
and FlashAttention-3's fp8 kernel from a generic fp8 recipe, and a kernel altered on purpose (one
rounding rule changed) is found out by the knob that changed."""
import json
import os
import subprocess

import numpy as np
import pytest

import qattn

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
QFLASH = os.path.join(DATA, "qflash-46adca5", "u-h3-n197-d64")
SAGE = os.path.join(DATA, "sageattn-1.0.6", "random-d64-full")
GENERIC = "q=int8/token k=int8/token p=fp16 v=fp16"
FA3 = os.path.join(DATA, "fa3-fwd-0.0.3", "smollm2")


@pytest.mark.parametrize("case", [QFLASH, os.path.join(DATA, "qflash-46adca5", "n-h2-n130-d256")])
def test_qflash_is_recovered_from_a_generic_recipe(tmp_path, case):
    # Both recorded QFlash cases the README's claim covers (d 64 with 3 heads, d 256 with 2).
    r = qattn.fit(case + "-qflash.h5", case + ".h5", start=GENERIC, output=str(tmp_path / "f"), rows=32)
    assert r["meets_rule"], r["path"]
    best = qattn.Recipe(r["best"])
    assert "softmax=qflash" in str(best) and "qflash.div=trunc32" in str(best), r["best"]
    # The move into the integer softmax is taken even though its first step loses ground.
    assert any(s["knob"].startswith("softmax: float -> qflash") for s in r["path"])
    report = json.load(open(tmp_path / "f" / "fit.json"))
    assert report["best"] == r["best"] and report["meets_rule"]


def test_sageattention_1_is_recovered_from_a_generic_recipe(qattn_exe, tmp_path):
    out = tmp_path / "s"
    p = subprocess.run([qattn_exe, "fit", SAGE + ".h5", SAGE + "-sageattn.h5", "--from", GENERIC, "--output", str(out), "--rows", "16", "--beam", "1", "-q"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr  # exit 0: the best recipe meets the rule
    r = json.load(open(out / "fit.json"))
    # SageAttention 1 subtracts K's mean (rounded to fp16), quantizes K per block of 64 keys and
    # writes fp16; each of those is a knob the search took.
    tokens = set(r["best"].split())
    assert {"ksmooth=global", "ksmooth.format=fp16", "out=fp16"} <= tokens, r["best"]
    assert any(t.startswith("k=int8/block:64") for t in tokens), r["best"]
    best = r["path"][-1]
    assert best["kernel_vs_recipe_db"] - best["recipe_vs_float64_db"] >= 30


def test_fa3_fp8_is_recovered_from_a_generic_fp8_recipe(dump, tmp_path):
    # FlashAttention-3's recorded fp8 outputs (tests/data/fa3-fwd-0.0.3, descales formed by torch on
    # the GPU), 12 rows of layer 0 between 248 and 424 (short causal rows keep the wgmma models'
    # emulation near a minute; each still spans two to four key tiles). From per-head e4m3 the search
    # reaches the preset's recipe, V's scale times fp32(1/448) included, and matches bit for bit.
    rec = next(l for l in qattn.read_outputs(FA3 + "-fa3-fp8.h5")["layers"] if l["layer"] == "0")
    rows = np.asarray(rec["rows"])
    pick = np.nonzero((rows >= 200) & (rows < 700))[0][:12]
    qattn.write_outputs(str(tmp_path / "fa3.h5"), "fa3-fp8", [{"layer": "0", "o": rec["o"][:, pick, :], "rows": [int(r) for r in rows[pick]]}],
                        recipe="", dtype="bf16")
    r = qattn.fit(str(tmp_path / "fa3.h5"), dump, start="q=e4m3/head k=e4m3/head v=e4m3/head p=e4m3/static:448 out=bf16",
                  output=str(tmp_path / "f"), rows=0, beam=1, budget=900)
    assert r["meets_rule"], r["path"]
    tokens = set(r["best"].split())
    assert {"q=e4m3/kvhead", "v=e4m3/head/amax:mul", "order=reverse", "tiles=fa3_sm90", "acc.qk=h200_e4m3_wgmma",
            "acc.pv=h200_e4m3_wgmma", "p=e4m3/static:256", "denominator=float"} <= tokens, r["best"]
    assert r["path"][-1]["kernel_vs_recipe_db"] == float("inf"), r["path"]


TORCH_CPU = os.path.join(DATA, "pytorch-2.9.1-cpu")


def test_pytorch_cpu_flash_is_recovered_from_a_generic_bf16_recipe(dump, tmp_path):
    """PyTorch 2.9.1's CPU flash attention in bf16 (tests/data/pytorch-2.9.1-cpu, recorded by running
    it): from generic bf16 operands the search finds the kernel's 512-key blocks, its fast exponential,
    the fp32 denominator and bf16 output, and on this input (d 256) its exact-looking Q K^T, and the
    recipe it finds holds on the recorded inputs it never saw."""
    case = os.path.join(TORCH_CPU, "h1-n300-d256-full")
    r = qattn.fit(case + "-bf16.h5", case + ".h5", start="q=bf16 k=bf16 v=bf16 p=bf16", output=str(tmp_path / "f"), rows=0, beam=1)
    assert r["meets_rule"], r["path"]
    tokens = set(r["best"].split())
    assert {"expform=aten", "denominator=float", "out=bf16", "acc.qk=exact"} <= tokens, r["best"]
    assert any(t.startswith("tiles=") and t.endswith("x512") for t in tokens), r["best"]
    for other, layer in [("g2-n600-d128-causal", "0"), ("g3-n1000-d64-causal", "0"), ("smollm2", "22")]:
        rec = next(l for l in qattn.read_outputs(os.path.join(TORCH_CPU, other + "-bf16.h5"))["layers"] if l["layer"] == layer)
        d = qattn.load_layer(dump if other == "smollm2" else os.path.join(TORCH_CPU, other + ".h5"), layer)
        args = dict(causal=d["causal"], softmax_scale=d["softmax_scale"], rows=rec["rows"])
        emu = qattn.emulate(d["q"], d["k"], d["v"], r["best"], **args)["out"]
        near = qattn.compare(rec["o"], emu)["sqnr_db"]
        err = qattn.compare(emu, qattn.reference(d["q"], d["k"], d["v"], **args)["out"])["sqnr_db"]
        assert near >= err + 30, (other, near, err)  # the lab's rule: 30 dB beyond the recipe's own error


def test_the_remaining_distance_is_set_against_the_emulators_floor(tmp_path):
    """PyTorch's CPU kernel in fp16 sums Q K^T in its fp16 GEMM's own order, which the recipe language
    names only as fp32 or exact: the fit stops short of the rule, and says that what is left sits at the
    emulator's own floor (the recipe's two orders as far apart as the kernel is from either)."""
    case = os.path.join(TORCH_CPU, "h1-n300-d256-full")
    r = qattn.fit(case + "-fp16.h5", case + ".h5", start="q=fp16 k=fp16 v=fp16 p=fp16", output=str(tmp_path / "f"), beam=1)
    best = r["path"][-1]["kernel_vs_recipe_db"]
    assert not r["meets_rule"] and r["at_floor"] and np.isfinite(r["floor_db"]), (best, r["floor_db"])
    assert "The remaining distance sits at that floor" in (tmp_path / "f" / "summary.md").read_text()
    assert json.load(open(tmp_path / "f" / "fit.json"))["floor_db"] == r["floor_db"]
    # Stopped at its start (no move gains 1000 dB), the search is far short of the floor, and says so.
    r = qattn.fit(case + "-fp16.h5", case + ".h5", start="q=fp16 k=fp16 v=fp16 p=fp16", output=str(tmp_path / "g"), min_gain=1000)
    assert not r["at_floor"] and r["path"][-1]["kernel_vs_recipe_db"] < r["floor_db"] - 10, (r["path"], r["floor_db"])
    assert "dB short of it" in (tmp_path / "g" / "summary.md").read_text()


def test_the_floor_of_an_integer_qk_recipe_is_its_float_pv(tmp_path):
    # Integer Q K^T sums exactly in any order; P V in fp16 summed in fp32 still has an order to set
    # the distance against (the search stopped at its start: no move gains 1000 dB).
    r = qattn.fit(QFLASH + "-qflash.h5", QFLASH + ".h5", start=GENERIC, output=str(tmp_path / "f"), rows=16, min_gain=1000)
    assert np.isfinite(r["floor_db"]), r
    assert "No float GEMM" not in (tmp_path / "f" / "summary.md").read_text()


def test_an_altered_kernel_is_found_out_by_its_knob(tmp_path):
    d = qattn.load_layer(QFLASH + ".h5", "0")
    altered = "preset=qflash-46adca5 qflash.div=lab"  # the kernel's output division, truncating, replaced by a floor
    o = qattn.emulate(d["q"], d["k"], d["v"], altered, causal=d["causal"], softmax_scale=d["softmax_scale"])["out"]
    qattn.write_outputs(str(tmp_path / "altered.h5"), "altered", [{"layer": "0", "o": o}], recipe="")
    r = qattn.fit(str(tmp_path / "altered.h5"), QFLASH + ".h5", start="preset=qflash-46adca5", output=str(tmp_path / "f"), rows=0)
    start, first = r["path"][0], r["path"][1]
    assert np.isfinite(start["kernel_vs_recipe_db"])  # the preset no longer matches
    assert first["knob"] == "qflash.div: trunc32 -> lab", r["path"]
    assert first["kernel_vs_recipe_db"] == float("inf")  # and with that knob back, bit for bit


def fp32_attention(q, k, v, *, causal, window, softmax_scale):
    g = q.shape[0] // k.shape[0]
    kk, vv = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    s = np.einsum("hid,hjd->hij", q, kk).astype(np.float32) * np.float32(softmax_scale)
    n = q.shape[1]
    if causal:
        s = np.where(np.arange(n)[None, :] <= np.arange(n)[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return (np.einsum("hij,hjd->hid", p, vv) / p.sum(axis=2, keepdims=True)).astype(np.float32)


def test_fit_of_an_attention_function(dump, tmp_path):
    out = tmp_path / "fn"
    r = qattn.fit(fp32_attention, dump, output=str(out), start=GENERIC, layers=["15"], contexts=[128], rows=16, budget=60)
    # A float32 kernel: the search leaves int8 behind for unquantized operands.
    assert r["path"][-1]["kernel_vs_recipe_db"] > r["path"][0]["kernel_vs_recipe_db"] + 20, r["path"]
    assert os.listdir(out / "kernel" / "outputs")  # the function's outputs, kept
    with pytest.raises(ValueError, match="exists"):
        qattn.fit(fp32_attention, dump, output=str(out), start=GENERIC, layers=["15"], contexts=[128])


@pytest.mark.parametrize("change, message", [
    (dict(rows=-1), "fit --rows: -1; expected a row count >= 0"),
    (dict(budget=0.0), "fit --budget: expected a positive number of seconds"),
    (dict(start=None), "attribute 'recipe': absent; give the recipe the search starts from"),
    (dict(start="q=int9"), "fit --from: "),
    (dict(force=True, resume=True), "--resume and --force exclude each other"),
    (dict(top=0), "fit --top: 0; expected at least 1"),
    (dict(beam=0), "fit --beam: 0; expected 1..64 recipes a step"),
])
def test_bad_input_is_one_clear_error(tmp_path, change, message):
    kw = dict(start=GENERIC, output=str(tmp_path / "bad"))
    kw.update(change)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        qattn.fit(QFLASH + "-qflash.h5", QFLASH + ".h5", **kw)
    assert not (tmp_path / "bad").exists()  # refused before any folder is made


def test_resume_reuses_no_evaluation_without_the_config_that_identifies_it(tmp_path):
    """A folder holding candidates.jsonl but no config.json (written by hand, or left by something
    else) says nothing of the units its distances were measured on: a resumed fit recomputes."""
    out = tmp_path / "fit"
    out.mkdir()
    (out / ".qattn-report").write_text("")
    start = str(qattn.Recipe(GENERIC))
    (out / "candidates.jsonl").write_text(json.dumps({"line": start, "kernel_vs_recipe_db": 123.0, "recipe_vs_float64_db": 1.0}) + "\n")
    r = qattn.fit(QFLASH + "-qflash.h5", QFLASH + ".h5", output=str(out), start=GENERIC, resume=True, budget=1.0, quiet=True)
    assert r["path"][0]["kernel_vs_recipe_db"] != 123.0, r["path"][0]
