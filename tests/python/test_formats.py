"""Formats through the bindings, cross-checked against ml_dtypes (an independent implementation)."""
import ml_dtypes
import numpy as np
import pytest

import qattn

ML = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
      "e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "e5m2fnuz": ml_dtypes.float8_e5m2fnuz, "e2m1": ml_dtypes.float4_e2m1fn}


@pytest.mark.parametrize("name", sorted(ML))
def test_decode_and_encode_agree_with_ml_dtypes(name):
    info = qattn.format_info(name)
    bits = info["bits"]
    codes = np.arange(1 << bits, dtype=np.uint32)
    ours = qattn.decode(codes, name)
    raw = codes.astype(np.uint16 if bits == 16 else np.uint8)
    with np.errstate(invalid="ignore"):
        theirs = raw.view(ML[name]).astype(np.float64)
    both_nan = np.isnan(ours) & np.isnan(theirs)
    assert np.array_equal(ours[~both_nan], theirs[~both_nan])
    assert np.array_equal(np.signbit(ours[~both_nan]), np.signbit(theirs[~both_nan]))
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))
    # Midpoints between neighbouring finite values, and their float32 neighbours, encode as
    # ml_dtypes rounds them (from float32: ml_dtypes converts float64 through float32).
    vals = np.unique(ours[np.isfinite(ours)])
    mids = ((vals[:-1] + vals[1:]) / 2).astype(np.float32)
    probes = np.concatenate([mids, np.nextafter(mids, np.float32(-np.inf)), np.nextafter(mids, np.float32(np.inf))])
    ours_r = qattn.round_to(probes, name)
    theirs_r = probes.astype(ML[name]).astype(np.float64)
    assert np.array_equal(ours_r, theirs_r), f"{name}: {np.sum(ours_r != theirs_r)} of {probes.size} probes differ"


def test_format_info_constants():
    e4m3 = qattn.format_info("e4m3")
    assert e4m3["max_finite"] == 448.0 and e4m3["min_subnormal"] == 2.0 ** -9 and e4m3["flush_below"] == 2.0 ** -10
    assert qattn.format_info("int8")["max_finite"] == 127.0
    assert set(qattn.formats()) >= {"fp32", "bf16", "fp16", "e4m3", "e5m2", "int8", "int4", "e8m0"}


def test_quantize_matches_the_documented_rule():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 64)).astype(np.float32)
    q = qattn.quantize(x, "int8/token")
    assert q.spec == "int8/token" and q.codes.shape == (2, 5, 64) and q.scales.shape == (10,)
    s = np.abs(x).max(axis=2).reshape(-1).astype(np.float32) / np.float32(127)  # scale = absmax / 127 in fp32
    assert np.array_equal(q.scales, s)
    vals = q.dequantize()
    codes = np.round(vals / s.reshape(2, 5, 1)).astype(np.int64)
    assert np.abs(codes).max() <= 127
    # dequantize = decode(code) * scale, exactly in float32
    assert np.array_equal(vals, (codes.astype(np.float32) * s.reshape(2, 5, 1)).astype(np.float32))
    g = qattn.quantize(x, "int4/group:32/scale:fp16")
    assert g.scales.shape == (2 * 5 * 2,)
    assert np.array_equal(qattn.round_to(g.scales, "fp16"), g.scales.astype(np.float64))


def test_format_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown format 'fp12'|fp12"):
        qattn.encode(np.zeros(3), "fp12")
    with pytest.raises(ValueError, match="does not fit e4m3"):
        qattn.decode(np.array([300], dtype=np.uint32), "e4m3")
    with pytest.raises(ValueError, match="no scale"):
        qattn.quantize(np.zeros((1, 2, 4), np.float32), "e4m3")
    with pytest.raises(ValueError, match="rank 3"):
        qattn.quantize(np.zeros((2, 4), np.float32), "int8/token")
