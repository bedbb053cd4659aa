"""No NaN or Inf is ever handed back as a result: inputs that would make one are refused with the
argument named, and metrics are computed so that finite inputs give finite answers."""
import math

import numpy as np
import pytest

import qattn


def small(scale=1.0):
    rng = np.random.default_rng(1)
    return [(scale * rng.standard_normal((2, 64, 32))).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("call, name", [
    (lambda q, k, v, s: qattn.reference(q, k, v, softmax_scale=s), "reference"),
    (lambda q, k, v, s: qattn.emulate(q, k, v, "q=int8/token k=int8/token", softmax_scale=s), "emulate"),
    (lambda q, k, v, s: qattn.emulate(q, k, v, "", softmax_scale=s), "emulate"),
])
def test_overflowing_attention_is_an_error(call, name):
    q, k, v = small()
    with pytest.raises(ValueError, match=rf"^{name}: the output has [0-9]+ non-finite value\(s\) \(first: \[0, 0, 0\] is NaN\): the scores"):
        call(q, k, v, 1e308)
    # Large but representable scores are computed, and the outputs are finite.
    out = call(q, k, v, 1e30)["out"]
    assert np.isfinite(out).all()


def test_compare_of_huge_values_is_finite():
    ref = np.array([1e308, -1e308, 3e307, -5e307])
    x = ref * (1 + 1e-6)
    m = qattn.compare(ref, x)
    # x = ref (1 + 1e-6): the error is 1e-6 of the signal, 120 dB, whatever the magnitude.
    assert abs(m["sqnr_db"] - 120) < 1e-6, m
    assert abs(m["rel_l2"] - 1e-6) < 1e-12 and abs(m["cosine"] - 1) < 1e-12 and math.isfinite(m["max_abs"]), m
    # Same metrics as the values scaled down by a power of two (an exact scaling).
    small_m = qattn.compare(ref * 2.0**-1000, x * 2.0**-1000)
    assert small_m["sqnr_db"] == m["sqnr_db"] and small_m["rel_l2"] == m["rel_l2"] and small_m["cosine"] == m["cosine"]


@pytest.mark.parametrize("bad, name", [(np.nan, "p"), (-0.25, "p"), (np.inf, "p")])
def test_row_divergence_refuses_non_probabilities(bad, name):
    p_ref = np.array([0.5, 0.25, 0.25])
    p = np.array([0.5, bad, 0.25])
    with pytest.raises(ValueError, match=rf"^row_divergence: {name}\[1\] = .*; expected a probability"):
        qattn.row_divergence(p_ref, p)
    with pytest.raises(ValueError, match=r"p_ref\[1\] = .*; expected a probability"):
        qattn.row_divergence(p, p_ref)


@pytest.mark.parametrize("spec, why", [("int8/static:0", "expected a positive finite multiplier"),
                                       ("int8/static:-3", "expected a positive finite multiplier"),
                                       ("e4m3/static:inf", "'inf' is not a finite number"), ("e4m3/static:nan", "'nan' is not a finite number")])
def test_static_scale_must_be_positive(spec, why):
    with pytest.raises(ValueError, match=why):
        qattn.p_flush_threshold(spec)
    with pytest.raises(ValueError, match=why):
        qattn.Recipe("p=" + spec)
