"""The lab's presets of real kernels against those kernels' outputs, recorded on the H200
(tests/data/*/README.md says how). The peers themselves are not part of the project."""
import functools
import os

import numpy as np
import pytest

import qattn

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "qflash-46adca5")
CASES = ["u-h3-n197-d64", "n-h2-n130-d256"]


@functools.lru_cache(maxsize=None)
def run(case, recipe):
    d = qattn.load_layer(os.path.join(DATA, case + ".h5"), "0")
    kern = qattn.read_outputs(os.path.join(DATA, case + "-qflash.h5"))["layers"][0]["o"]
    emu = qattn.emulate(d["q"], d["k"], d["v"], recipe, causal=d["causal"], softmax_scale=d["softmax_scale"])["out"]
    sv = qattn.quantize(d["v"], "int8/tensor/scale:fp16/div:fp16").scales[0]
    return kern, emu, sv


@pytest.mark.parametrize("case", CASES)
def test_qflash_preset_is_the_kernel_but_for_its_approximate_division(case):
    kern, emu, sv = run(case, "preset=qflash-46adca5")
    differ = kern != emu
    # The kernel divides O by l with the GPU's approximate fp32 division: an exact multiple can land
    # just under its integer and truncate one level toward zero. That is the only difference
    # allowed, at the rate measured on the H200 (87 of 628,672 outputs over seven shapes).
    assert differ.sum() <= 1e-3 * kern.size, f"{differ.sum()} of {kern.size} outputs differ"
    kc, ec = np.rint(kern[differ] / sv), np.rint(emu[differ] / sv)
    assert np.all(np.abs(kc) == np.abs(ec) - 1) and np.all(np.sign(kc) * np.sign(ec) >= 0)


@pytest.mark.parametrize("flip", ["qflash.exp=lab", "qflash.requant=lab", "qflash.release=lab", "qflash.div=lab", "out=fp32",
                                  "tiles=32x64", "q=int8/tensor/scale:fp16 k=int8/tensor/scale:fp16 v=int8/tensor/scale:fp16"])
def test_each_kernel_step_is_needed(flip):
    # Each knob of the preset, put back to the lab's reading, moves many outputs (at least 10x the
    # division's differences) on the d = 64 case.
    kern, emu, _ = run("u-h3-n197-d64", "preset=qflash-46adca5 " + flip)
    assert np.sum(kern != emu) > 10 * 6, flip


def test_kernel_constants_matter_at_d256():
    kern, emu, _ = run("n-h2-n130-d256", "preset=qflash-46adca5 qflash.consts=lab")
    assert np.sum(kern != emu) > 60  # I0 rounds differently from the fp16 scale product and the kernel's log2 e


def test_presets_are_listed_with_sources(qattn_exe):
    import subprocess
    listed = {p["name"]: p for p in qattn.presets()}
    assert {"qflash-46adca5", "sageattn-1.0.6", "qflash-lab"} <= set(listed)
    for p in listed.values():
        assert qattn.Recipe(p["recipe"]) == qattn.Recipe("preset=" + p["name"]) and p["source"]
    cli = subprocess.run([qattn_exe, "presets", "--lines"], check=True, capture_output=True, text=True).stdout.splitlines()
    assert [line.split("\t")[0] for line in cli] == list(listed)


def test_preset_round_trips_and_overrides():
    r = qattn.Recipe("preset=qflash-46adca5")
    assert qattn.Recipe(str(r)) == r and qattn.Recipe.from_json(r.to_json()) == r
    assert "qflash.exp=fixed16" in str(r) and "out=fp16" in str(r) and "/div:fp16" in str(r)
    assert qattn.Recipe.from_json({"preset": "qflash-46adca5", "tiles": "32x64"}) == qattn.Recipe("preset=qflash-46adca5 tiles=32x64")
    lab = qattn.Recipe("preset=qflash-lab")
    assert "qflash.exp=lab" in str(lab) and "out=" not in str(lab)
    with pytest.raises(ValueError, match="unknown preset 'qflash'; expected one of: qflash-46adca5, sageattn-1.0.6, "):
        qattn.Recipe("preset=qflash")
    with pytest.raises(ValueError, match="need softmax=qflash"):
        qattn.Recipe("qflash.exp=fixed16")
    with pytest.raises(ValueError, match="expected fp32, fp16 or bf16"):
        qattn.Recipe("out=e4m3")
    with pytest.raises(ValueError, match="unknown value 'fixed8'"):
        qattn.Recipe("preset=qflash-46adca5 qflash.exp=fixed8")


SAGE = os.path.join(os.path.dirname(__file__), "..", "data", "sageattn-1.0.6")


@functools.lru_cache(maxsize=None)
def sage(recipe):
    d = qattn.load_layer(os.path.join(SAGE, "random-d64-full.h5"), "0")
    kern = qattn.read_outputs(os.path.join(SAGE, "random-d64-full-sageattn.h5"))["layers"][0]["o"]
    kw = dict(causal=d["causal"], softmax_scale=d["softmax_scale"])
    emu = qattn.emulate(d["q"], d["k"], d["v"], recipe, **kw)["out"]
    ref = qattn.reference(d["q"], d["k"], d["v"], **kw)["out"]
    return qattn.compare(emu, kern)["sqnr_db"], qattn.compare(ref, emu)["sqnr_db"]


def test_sageattn_preset_is_30_db_below_its_own_error():
    own, recipe_error = sage("preset=sageattn-1.0.6")
    # The lab's rule for a kernel and its emulation: their distance at least 30 dB under the
    # recipe's distance from float64 (here 73.1 dB against 34.5 dB, measured).
    assert own >= recipe_error + 30, (own, recipe_error)


@pytest.mark.parametrize("flip", ["ksmooth.format=fp32", "qprescale=0", "pad=none", "acc.pv=fp32", "out=fp32",
                                  "q=int8/block:128/round:away k=int8/block:64/round:away"])
def test_each_sageattn_choice_is_needed(flip):
    # (round:away moves nothing on these inputs; on the shipped dump's layer 15 dropping it costs 15 dB.)
    own, _ = sage("preset=sageattn-1.0.6")
    flipped, _ = sage("preset=sageattn-1.0.6 " + flip)
    assert flipped < own - 1.5, (flip, flipped, own)  # each choice is worth at least 1.5 dB here (2 to 36 dB measured)


RECORDED = os.path.join(os.path.dirname(__file__), "..", "data")
DUMP = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "smollm2-135m-2k.h5")


@functools.lru_cache(maxsize=None)
def recorded_distance(path, layer, recipe):
    """Kernel vs recipe SQNR, heads pooled, on the recorded rows of a real kernel's outputs."""
    rec = next(l for l in qattn.read_outputs(os.path.join(RECORDED, path))["layers"] if l["layer"] == layer)
    d = qattn.load_layer(DUMP, layer)
    emu = qattn.emulate(d["q"], d["k"], d["v"], recipe, causal=d["causal"], softmax_scale=d["softmax_scale"], rows=rec["rows"])["out"]
    return qattn.compare(emu, rec["o"])["sqnr_db"]


def fa3_distance(kind, layer, recipe):
    return recorded_distance(f"fa3-fwd-0.0.3/smollm2-fa3-{kind}.h5", layer, recipe)


def sage2_distance(layer, recipe, arch="sm90"):
    return recorded_distance(f"sageattention-2-d1a57a5/smollm2-sageattn2-{arch}.h5", layer, recipe)


@pytest.mark.parametrize("kind, layer, measured", [
    # Measured on these rows when the presets were set (the rule asks 30 dB beyond the presets'
    # 29.9 / 19.9 dB (fp8) and 53.6 / 44.0 dB (bf16) here); 0.5 dB below, so a change that moves a
    # preset away from the kernel fails while the emulator's own changes of a last bit pass.
    ("fp8", "0", 95.08), ("fp8", "15", 88.64),
])
def test_fa3_presets_stay_as_near_the_kernel_as_measured(kind, layer, measured):
    assert fa3_distance(kind, layer, f"preset=fa3-{kind}") > measured - 0.5


def test_fa3_bf16_preset_is_the_kernel_bit_for_bit():
    # The bf16 wgmma's measured sums and the softmax's vendor math (the exponent as one fused
    # multiply-add, ex2.approx, per-lane row sums) reproduce every recorded output.
    for layer in ("0", "15"):
        assert fa3_distance("bf16", layer, "preset=fa3-bf16") == float("inf"), layer


@pytest.mark.parametrize("flip", ["expform=lab", "exp2=rn", "rowsum=sequential", "acc.qk=fp32", "acc.pv=fp32"])
def test_each_fa3_bf16_choice_is_needed(flip):
    # Each put back to the lab's default leaves at least one layer short of bit-equal (measured, the
    # worse layer: 130.9, 130.7, 101.4, 90.7 and 75.7 dB).
    worst = min(fa3_distance("bf16", layer, f"preset=fa3-bf16 {flip}") for layer in ("0", "15"))
    assert worst != float("inf"), flip


def test_fa3_takes_q_scales_per_kv_head_and_walks_key_tiles_backwards():
    # One Q descale per KV head (the API's [B, H_kv]), not per query head, and key tiles from the
    # last to the first: each more than 10 dB nearer the kernel on these rows.
    near = fa3_distance("fp8", "15", "preset=fa3-fp8")
    assert near > fa3_distance("fp8", "15", "preset=fa3-fp8 q=e4m3/head") + 10
    assert fa3_distance("fp8", "0", "preset=fa3-fp8") > fa3_distance("fp8", "0", "preset=fa3-fp8 order=forward") + 15
    assert fa3_distance("bf16", "0", "preset=fa3-bf16") > fa3_distance("bf16", "0", "preset=fa3-bf16 order=forward") + 15


def test_fa3_fp8_scales_are_formed_as_torch_forms_them_on_the_gpu():
    # The proof script's absmax / 448 runs on the GPU, where torch multiplies by fp32(1 / 448)
    # (amax:mul). On layer 0, V's absmax over 448 is exact for KV head 0: the exact scale makes
    # ties that the reciprocal's scale, an ulp off, breaks. Measured: 95.08 against 63.98 dB; 25 so
    # that a last-bit change elsewhere passes and the exact scale does not.
    exact = "preset=fa3-fp8 q=e4m3/kvhead k=e4m3/head v=e4m3/head"
    assert fa3_distance("fp8", "0", "preset=fa3-fp8") > fa3_distance("fp8", "0", exact) + 25


def test_fa3_fp8_sums_codes_on_the_measured_wgmma():
    # Q K^T on the measured e4m3 wgmma, the descales applied to the sum of the codes (an MMA sees
    # codes): 7.6 / 40 dB nearer the kernel on these rows than the 13-bit model it replaced.
    old = "preset=fa3-fp8 acc.qk=mma(chunk=32,align=32,chunk_bits=13,chunk_round=zero,acc_bits=13,add_round=zero,flush=0)"
    assert fa3_distance("fp8", "0", "preset=fa3-fp8") > fa3_distance("fp8", "0", old) + 5
    assert fa3_distance("fp8", "15", "preset=fa3-fp8") > fa3_distance("fp8", "15", old) + 30


def test_mma_models_sum_the_codes_of_scaled_float_q_and_k():
    # Under a matrix unit's model a scaled e4m3 Q and K enter Q K^T as codes, their scales applied to
    # the score: the same recipe fed the codes themselves (unit scales, the scales folded into the
    # softmax scale, V's applied to the output) agrees but for fp32 roundings of the folded scale
    # (98.5 dB measured; summing the scaled values instead truncates other bits: 58.5 dB).
    d = qattn.load_layer(DUMP, "0")
    rows = qattn.sample_rows(2048, 64, 1)
    q, k, v = d["q"][:3], d["k"][:1], d["v"][:1]
    tail = " p=e4m3/static:256 denominator=float tiles=64x64 acc.qk=h200_e4m3_wgmma acc.pv=h200_e4m3_wgmma out=fp32"
    scaled = qattn.emulate(q, k, v, "q=e4m3/tensor k=e4m3/tensor v=e4m3/tensor" + tail, causal=True, softmax_scale=0.125, rows=rows)["out"]
    qq, kq, vq = (qattn.quantize(x, "e4m3/tensor") for x in (q, k, v))
    sq, sk, sv = (float(np.float32(t.scales[0])) for t in (qq, kq, vq))
    codes = [t.dequantize() / np.float32(t.scales[0]) for t in (qq, kq, vq)]
    fed = qattn.emulate(*codes, "q=e4m3/static:1 k=e4m3/static:1 v=e4m3/static:1" + tail, causal=True,
                        softmax_scale=0.125 * sq * sk, rows=rows)["out"] * np.float32(sv)
    assert qattn.compare(fed, scaled)["sqnr_db"] > 90


@pytest.mark.parametrize("layer, measured", [
    # Measured on these rows when the preset was set; the rule asks 30 dB beyond the preset's own
    # error here (37.3 / 30.5 dB); 0.5 dB below, as for FlashAttention-3 above.
    ("0", 80.40), ("15", 74.10),
])
def test_sageattention2_preset_stays_as_near_the_kernel_as_measured(layer, measured):
    assert sage2_distance(layer, "preset=sageattn2-sm90") > measured - 0.5


def test_sageattention2_scales_a_lanes_strided_rows_and_adds_its_epsilon():
    # Its per-thread int8: Q rows 16w+g and 16w+g+8 share a scale, K keys 8j+2t+{0,1} of a 128-key
    # tile another (not consecutive rows), and 1e-7 is added to each scale: each knob more than
    # 10 dB of the distance on these rows.
    near = sage2_distance("15", "preset=sageattn2-sm90")
    assert near > sage2_distance("15", "preset=sageattn2-sm90 q=int8/block:2/div/round:away/eps:1e-7 k=int8/block:32/div/round:away/eps:1e-7") + 10
    assert near > sage2_distance("15", "preset=sageattn2-sm90 q=int8/thread:16:8:1/div/round:away k=int8/thread:128:8:2/div/round:away") + 10


@pytest.mark.parametrize("backend, kind, layer, measured", [
    # Measured on these rows when the presets were set. ggml d99724f's CPU flash attention (x86 AVX2,
    # prefill): the rule asks 30 dB beyond the presets' 43.9 / 35.5 (q8_0) and 21.3 / 14.4 (q4_0) dB.
    ("cpu", "q8_0", "0", 85.08), ("cpu", "q8_0", "15", 66.00), ("cpu", "q4_0", "0", 85.98), ("cpu", "q4_0", "15", 70.63),
    # Its CUDA vector kernel (single-row decode, the H200): beyond 42.5 / 35.5 / 35.7 / 35.1 / 39.2 dB
    # (q8_0) and 20.8 / 13.7 / 14.9 / 12.6 / 17.2 dB (q4_0) on these rows.
    ("cuda", "q8_0", "0", 104.91), ("cuda", "q8_0", "7", 75.64), ("cuda", "q8_0", "15", 73.20), ("cuda", "q8_0", "22", 83.89),
    ("cuda", "q8_0", "29", 86.40), ("cuda", "q4_0", "0", 81.19), ("cuda", "q4_0", "7", 126.60), ("cuda", "q4_0", "15", 57.62),
    ("cuda", "q4_0", "22", 50.41), ("cuda", "q4_0", "29", 67.79),
    # The CPU's f16 decode with 2 threads (split=2): beyond 51.6 / 51.3 / 45.6 / 50.1 / 49.8 dB.
    ("cpu", "f16-decode", "0", 94.44), ("cpu", "f16-decode", "7", 93.25), ("cpu", "f16-decode", "15", 91.12),
    ("cpu", "f16-decode", "22", 89.41), ("cpu", "f16-decode", "29", 90.99),
])
def test_llamacpp_presets_stay_as_near_the_kernel_as_measured(backend, kind, layer, measured):
    if kind == "f16-decode":
        path, preset = "ggml-d99724f-cpu/smollm2-llamacpp-f16-cpu-decode.h5", "llamacpp-f16-cpu-decode"
    elif backend == "cpu":
        path, preset = f"ggml-d99724f-cpu/smollm2-llamacpp-{kind}-cpu.h5", f"llamacpp-{kind}-cpu"
    else:
        path, preset = f"ggml-d99724f-cuda/smollm2-llamacpp-{kind}-decode.h5", f"llamacpp-{kind}"
    assert recorded_distance(path, layer, f"preset={preset}") > measured - 0.5


def test_llamacpp_cpu_codes_from_the_fp32_scale_and_q4_0s_own_grid():
    # ggml codes with the fp32 d and stores it in fp16 (codes:fp32), and q4_0 puts the element of
    # largest magnitude at -8 (amax:signed): each more than 15 dB of the distance on these rows.
    q8 = "ggml-d99724f-cpu/smollm2-llamacpp-q8_0-cpu.h5"
    assert recorded_distance(q8, "15", "preset=llamacpp-q8_0-cpu") > recorded_distance(
        q8, "15", "preset=llamacpp-q8_0-cpu q=int8/group:32/scale:fp16 k=int8/group:32/scale:fp16 v=int8/group:32/scale:fp16") + 15
    q4 = "ggml-d99724f-cpu/smollm2-llamacpp-q4_0-cpu.h5"
    assert recorded_distance(q4, "15", "preset=llamacpp-q4_0-cpu") > recorded_distance(
        q4, "15", "preset=llamacpp-q4_0-cpu k=int4/group:32/scale:fp16/codes:fp32 v=int4/group:32/scale:fp16/codes:fp32") + 15


@pytest.mark.parametrize("layer, measured", [("0", 73.45), ("15", 64.55)])  # as above; its own error 37.0 / 29.1 dB
def test_sageattention2_sm89_kernel_maps_v_to_2_25(layer, measured):
    # The fp32+fp16 kernel (the sm89 code, run on the H200) quantizes V per channel within +-2.25 so
    # that its fp16 accumulator cannot overflow: without max:2.25 the preset is 30 dB farther.
    near = sage2_distance(layer, "preset=sageattn2-sm89", "sm89")
    assert near > measured - 0.5
    assert near > sage2_distance(layer, "preset=sageattn2-sm89 v=e4m3/channel", "sm89") + 25


def test_llamacpp_cuda_knobs_each_needed():
    q8 = "ggml-d99724f-cuda/smollm2-llamacpp-q8_0-decode.h5"
    # ggml-cuda codes K and V with the fp32 d and stores it in fp16 (codes:fp32): 46 dB on layer 0.
    assert recorded_distance(q8, "0", "preset=llamacpp-q8_0") > recorded_distance(
        q8, "0", "preset=llamacpp-q8_0 k=int8/group:32/scale:fp16/round:away v=int8/group:32/scale:fp16/round:away") + 30
    # Q's x / d under -use_fast_math is x times an approximate 1/d: a true division (/div) moves codes
    # that sit at a rounding boundary (27 dB on layer 0).
    assert recorded_distance(q8, "0", "preset=llamacpp-q8_0") > recorded_distance(q8, "0", "preset=llamacpp-q8_0 q=int8/group:32/div/round:away") + 20
    # q4_0's zero point times Q's unquantized sum (kzero=qsum): 30 dB on layer 15.
    q4 = "ggml-d99724f-cuda/smollm2-llamacpp-q4_0-decode.h5"
    assert recorded_distance(q4, "15", "preset=llamacpp-q4_0") > recorded_distance(q4, "15", "preset=llamacpp-q4_0 kzero=codes") + 20


def test_llamacpp_cpu_f16_decode_knobs_each_needed():
    path = "ggml-d99724f-cpu/smollm2-llamacpp-f16-cpu-decode.h5"
    near = recorded_distance(path, "15", "preset=llamacpp-f16-cpu-decode")  # 91.1 dB when set
    # Each V P added to the fp16 accumulator by an fp32 FMA (fp16fma), not rounded to fp16 first: 22 dB.
    assert near > recorded_distance(path, "15", "preset=llamacpp-f16-cpu-decode acc.pv=fp16") + 10
    # The cache split by cell, one chunk per thread (split.pad), not the visible keys in halves: 30 dB.
    assert near > recorded_distance(path, "15", "preset=llamacpp-f16-cpu-decode split.pad=0 split.min=0") + 15
    # With 4 threads the same preset takes split=4 (95.0 / 92.9 dB on layers 0 / 15 when set); its
    # 2-thread split is 40 dB farther.
    four = "ggml-d99724f-cpu/smollm2-llamacpp-f16-cpu-decode-4threads.h5"
    for layer, measured in (("0", 95.03), ("15", 92.93)):
        at4 = recorded_distance(four, layer, "preset=llamacpp-f16-cpu-decode split=4")
        assert at4 > measured - 0.5
        assert at4 > recorded_distance(four, layer, "preset=llamacpp-f16-cpu-decode") + 20


TORCH_CPU = "pytorch-2.9.1-cpu"
TORCH_CASES = [("smollm2", "7"), ("smollm2", "22"), ("g2-n600-d128-causal", "0"), ("h1-n300-d256-full", "0"), ("g3-n1000-d64-causal", "0")]


@functools.lru_cache(maxsize=None)
def torch_cpu(case, layer, dtype, recipe):
    """(kernel vs recipe, recipe vs float64) SQNR, heads pooled, on the recorded rows of PyTorch's CPU
    flash attention (tests/data/pytorch-2.9.1-cpu/README.md)."""
    rec = next(l for l in qattn.read_outputs(os.path.join(RECORDED, TORCH_CPU, f"{case}-{dtype}.h5"))["layers"] if l["layer"] == layer)
    d = qattn.load_layer(DUMP if case == "smollm2" else os.path.join(RECORDED, TORCH_CPU, case + ".h5"), layer)
    args = dict(causal=d["causal"], softmax_scale=d["softmax_scale"], rows=rec["rows"])
    emu = qattn.emulate(d["q"], d["k"], d["v"], recipe, **args)["out"]
    ref = qattn.reference(d["q"], d["k"], d["v"], **args)["out"]
    return qattn.compare(rec["o"], emu)["sqnr_db"], qattn.compare(emu, ref)["sqnr_db"]


@pytest.mark.parametrize("case, layer", TORCH_CASES)
def test_pytorch_cpu_flash_bf16_preset_meets_the_rule_on_every_input(case, layer):
    # 85.9-94.0 dB from the kernel where the rule asks 73.4-80.3 (30 dB beyond the recipe's own error).
    near, err = torch_cpu(case, layer, "bf16", "preset=pytorch-cpu-flash-bf16")
    assert near >= err + 30, (near, err)


@pytest.mark.parametrize("case, layer, measured", [
    # The fp16 preset as near as measured (the rule, 30 dB beyond 71-73 dB, is met on the two random
    # causal inputs; 3.6-15 dB short elsewhere: the fp16 GEMM's order of Q K^T, not modelled); 0.5 dB
    # below, so a change that moves the preset away from the kernel fails.
    ("smollm2", "7", 98.95), ("smollm2", "22", 99.30), ("g2-n600-d128-causal", "0", 104.32), ("h1-n300-d256-full", "0", 86.28),
    ("g3-n1000-d64-causal", "0", 102.20),
])
def test_pytorch_cpu_flash_fp16_preset_stays_as_near_as_measured(case, layer, measured):
    near, err = torch_cpu(case, layer, "fp16", "preset=pytorch-cpu-flash-fp16")
    assert near > measured - 0.5, near
    if case.startswith(("g2", "g3")):
        assert near >= err + 30


@pytest.mark.parametrize("dtype, case, flip, at_least", [
    # ATen's fast exponential is most of what separated a generic bf16 recipe from the kernel (65
    # against 86-94 dB); the output's rounding is needed too, and O times the reciprocal of l (4.9 dB
    # on the fp16 GQA input; elsewhere it moves less than the unmodelled GEMM orders do).
    ("bf16", "smollm2", "expform=lab rowsum=sequential", 15), ("bf16", "smollm2", "out=fp32", 30),
    ("fp16", "g2-n600-d128-causal", "norm=div", 3),
])
def test_each_pytorch_cpu_flash_choice_is_needed(dtype, case, flip, at_least):
    layer = "22" if case == "smollm2" else "0"
    own, _ = torch_cpu(case, layer, dtype, f"preset=pytorch-cpu-flash-{dtype}")
    flipped, _ = torch_cpu(case, layer, dtype, f"preset=pytorch-cpu-flash-{dtype} " + flip)
    assert flipped < own - at_least, (flip, flipped, own)
