"""Recipes, the reference, the emulator, metrics, statistics and dumps through the bindings; the
same numbers as the CLI (one implementation)."""
import json
import os
import subprocess

import numpy as np
import pytest

import qattn

LINE = "q=int8/token k=int8/token ksmooth=global acc.qk=exact p=e4m3/static:448"


def test_recipe_round_trips():
    r = qattn.Recipe(LINE)
    assert qattn.Recipe(str(r)) == r
    assert qattn.Recipe.from_json(r.to_json()) == r
    assert qattn.Recipe.from_json(json.dumps(r.to_json())) == r
    assert r.to_json()["p"] == "e4m3/static:448"
    with pytest.raises(ValueError, match="ksmooth"):
        qattn.Recipe("ksmooth=sometimes")
    with pytest.raises(ValueError, match="unknown key|frobnicate"):
        qattn.Recipe.from_json({"frobnicate": 1})


def test_eval_numbers_equal_the_cli(dump, qattn_exe):
    d = qattn.load_layer(dump, "15", tokens=256)
    assert d["q"].shape == (9, 256, 64) and d["k"].shape == (3, 256, 64) and d["causal"]
    kw = dict(causal=d["causal"], window=d["window"], softmax_scale=d["softmax_scale"])
    ref = qattn.reference(d["q"], d["k"], d["v"], **kw)
    emu = qattn.emulate(d["q"], d["k"], d["v"], LINE, **kw)
    assert emu["out"].dtype == np.float32 and emu["out"].shape == (9, 256, 64)
    cli = json.loads(subprocess.run([qattn_exe, "eval", "--data", dump, "--layer", "15", "--tokens", "256", "--recipe", LINE, "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    for h in range(9):
        m = qattn.compare(ref["out"][h], emu["out"][h])
        assert m["sqnr_db"] == cli["heads"][h]["sqnr_db"]  # the same C++ code: bit-identical
        assert m["rel_l2"] == cli["heads"][h]["rel_l2"]


def test_fp32_recipe_and_probability_rows():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((4, 100, 32)).astype(np.float32) for _ in range(3))
    k2, v2 = k[:2], v[:2]
    ref = qattn.reference(q, k2, v2, causal=True, prob_rows=[0, 50, 99])
    emu = qattn.emulate(q, k2, v2, qattn.Recipe(""), causal=True, prob_rows=[0, 50, 99])
    # fp32 arithmetic only: float32 rounding of ~d + N operations, far above 100 dB
    assert qattn.compare(ref["out"], emu["out"])["sqnr_db"] > 100
    assert ref["probs"].shape == (4, 3, 100)
    assert np.allclose(ref["probs"].sum(axis=2), 1.0, rtol=0, atol=1e-12)  # float64 rows sum to 1 to rounding
    assert np.all(ref["probs"][:, 0, 1:] == 0)  # causal: row 0 sees only key 0
    dv = qattn.row_divergence(ref["probs"][1, 1], emu["probs"][1, 1])
    # The emulator's weights sum to 1 only to fp32 rounding (~1e-7), so KL can read slightly negative.
    assert abs(dv["kl"]) < 1e-6
    rows = qattn.reference(q, k2, v2, causal=True, rows="sample:10:4")["rows"]
    assert np.array_equal(rows, qattn.sample_rows(100, 10, 4))
    sub = qattn.reference(q, k2, v2, causal=True, rows=rows)
    # Float64 sums are grouped by query block, so another row set can move the last bits only.
    assert np.allclose(sub["out"], ref["out"][:, rows, :], rtol=1e-13, atol=1e-15)
    sub_emu = qattn.emulate(q, k2, v2, "", causal=True, rows=rows)
    assert np.array_equal(sub_emu["out"], emu["out"][:, rows, :])  # the emulator's rows are independent, bit for bit


def test_input_errors_name_what_was_expected():
    z = np.zeros((2, 8, 4), np.float32)
    with pytest.raises(ValueError, match="rank 3"):
        qattn.reference(z[0], z, z)
    with pytest.raises(ValueError, match="dtype int32"):
        qattn.reference(z.astype(np.int32), z, z)
    with pytest.raises(ValueError, match=r"\[head 1, token 2, channel 3\] is NaN"):
        bad = z.copy()
        bad[1, 2, 3] = np.nan
        qattn.reference(bad, z, z)
    with pytest.raises(ValueError, match="not exactly a float32"):
        qattn.reference(z.astype(np.float64) + 0.1, z, z)
    with pytest.raises(ValueError, match="strictly increasing"):
        qattn.reference(z, z, z, rows=[3, 1])
    with pytest.raises(ValueError, match="outside"):
        qattn.reference(z, z, z, rows=[9])
    with pytest.raises(ValueError, match="Hq = 3 is not a multiple of Hkv = 2"):
        qattn.reference(np.zeros((3, 8, 4), np.float32), z, z)
    with pytest.raises(ValueError, match="different shapes"):
        qattn.compare(np.ones(3), np.ones(4))


def test_statistics(dump):
    d = qattn.load_layer(dump, "0", heads=[0], tokens=512)
    c = qattn.channel_outliers(d["k"], 0)
    assert c["ratio"] == pytest.approx(c["max"] / c["median"], rel=1e-15)
    assert c["absmax"].shape == (64,)
    bad = np.array(d["k"])
    bad[0, 3, 5] = np.inf
    with pytest.raises(ValueError, match=r"channel_outliers: t\[0, 3, 5\] is Inf; expected finite values"):
        qattn.channel_outliers(bad, 0)
    p = qattn.reference(d["q"], d["k"], d["v"], causal=True, prob_rows=[511])["probs"][0, 0]
    mass = qattn.mass_per_decade(p)
    assert mass.shape == (9,) and mass.sum() == pytest.approx(1.0, abs=1e-12)
    t = qattn.p_flush_threshold("int8/static:127")
    assert t == 0.5 / 127
    assert qattn.mass_flushed(p, t) == pytest.approx(float(p[p / p.max() <= t].sum()), rel=1e-12)


def test_dump_write_and_read(tmp_path):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((4, 16, 8)).astype(np.float16).astype(np.float32)
    k = rng.standard_normal((2, 16, 8)).astype(np.float16).astype(np.float32)
    path = str(tmp_path / "d.h5")
    attrs = {"schema": "qattn-dump/1", "model": "test", "weights": "random", "text_source": "none", "n_tokens": 16,
             "created_by": "pytest", "created_at": "now"}
    qattn.write_dump(path, [{"name": "3", "q": q, "k": k, "v": k, "causal": False, "sliding_window": 4}], attrs, dtype="fp16")
    info = qattn.open_dump(path)
    assert info["n_tokens"] == 16 and info["layers"][0]["sliding_window"] == 4 and info["layers"][0]["dtype"] == "fp16"
    back = qattn.load_layer(path, "3")
    assert np.array_equal(back["q"], q) and np.array_equal(back["k"], k) and not back["causal"]
    with pytest.raises(qattn.DatasetError, match="no such layer"):
        qattn.load_layer(path, "4")
    # Layer names past 64-bit integers sort by value (std::stoll threw out_of_range on them).
    big = str(tmp_path / "big.h5")
    qattn.write_dump(big, [{"name": n, "q": q, "k": k, "v": k} for n in ("99999999999999999999", "7", "100000000000000000000")], attrs)
    assert [l["name"] for l in qattn.open_dump(big)["layers"]] == ["7", "99999999999999999999", "100000000000000000000"]
    with pytest.raises(qattn.DatasetError, match="no such file"):
        qattn.open_dump(str(tmp_path / "missing.h5"))


class DLPackOnly:
    """An array that offers only the DLPack protocol (as a torch CPU tensor does to nanobind)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_inputs_and_the_gpu_without_a_gpu_build():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 16, 8)).astype(np.float32)
    a = qattn.reference(q, q, q)["out"]
    b = qattn.reference(DLPackOnly(q), DLPackOnly(q), DLPackOnly(q))["out"]
    assert np.array_equal(a, b)
    if not qattn.gpu_available():
        with pytest.raises(ValueError, match="built without GPU kernels"):
            qattn.gpu_run(q, q, q, "q=fp32")


def test_score_with_a_batched_layout(dump, tmp_path):
    def batched(q, k, v, *, causal, window, softmax_scale):
        assert q.shape[0] == 1 and q.ndim == 4
        return qattn.emulate(q[0], k[0], v[0], "q=bf16 k=bf16 p=bf16 v=bf16", causal=causal, window=window,
                             softmax_scale=softmax_scale)["out"][None]

    rows = qattn.score(batched, dump, layers=["7"], contexts=[128], recipe="q=bf16 k=bf16 p=bf16 v=bf16", layout="BHND",
                       output=str(tmp_path / "b"))
    # The function is the recipe's own emulation: bit-equal, so its distance from the recipe is infinite.
    assert all(r["kernel_vs_recipe_sqnr_db"] == "inf" and r["kernel_equal_recipe"] == 128 * 64 for r in rows)
    with pytest.raises(ValueError, match=r"expected \[1, Hq, N, d\]"):
        qattn.score(lambda q, k, v, **kw: q[0], dump, layers=["7"], contexts=[64], layout="BHND", output=str(tmp_path / "c"))


@pytest.mark.parametrize("scale_q,scale_v,softmax_scale", [(1e20, 1.0, 0.0), (1.0, 3e38, 0.0), (1.0, 1.0, 1e300)])
def test_extreme_finite_inputs_never_print_nan(tmp_path, qattn_exe, scale_q, scale_v, softmax_scale):
    # Finite dumps whose attention overflows: q, k of 1e20 (fp32 scores of 1e40), v of 3e38 (fp32
    # sums past the largest float), a softmax scale of 1e300 (float64 scores past 1e308). eval gives
    # one error naming file, layer and recipe; run records the unit as failed. Never a NaN metric.
    rng = np.random.default_rng(2)
    q = (rng.standard_normal((2, 32, 8)) * scale_q).astype(np.float32)
    k = (rng.standard_normal((1, 32, 8)) * scale_q).astype(np.float32)
    v = np.minimum(np.abs(rng.standard_normal((1, 32, 8))) * scale_v + scale_v, 3e38).astype(np.float32)
    path = str(tmp_path / "x.h5")
    attrs = {"schema": "qattn-dump/1", "model": "test", "weights": "random", "text_source": "none", "n_tokens": 32,
             "created_by": "pytest", "created_at": "now"}
    qattn.write_dump(path, [{"name": "0", "q": q, "k": k, "v": v, "causal": True, "softmax_scale": softmax_scale}], attrs, dtype="fp32")
    recipe = "q=fp32 k=fp32 p=fp32 v=fp32"
    e = subprocess.run([qattn_exe, "eval", "--data", path, "--layer", "0", "--recipe", recipe, "--json", "--quiet"],
                       capture_output=True, text=True)
    assert e.returncode == 1 and f"x.h5: layer 0, recipe '{recipe}': no result to report" in e.stderr, (e.returncode, e.stdout, e.stderr)
    exp = tmp_path / "e.json"
    exp.write_text(json.dumps({"name": "x", "dataset": path, "recipes": {"fp32": recipe}, "kl_rows": 2, "output": str(tmp_path / "r")}))
    r = subprocess.run([qattn_exe, "run", str(exp), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    failed = [json.loads(x) for x in open(tmp_path / "r" / "failed.jsonl")]
    assert len(failed) == 1 and "non-finite" in failed[0]["reason"], failed
    for f in ("results.csv", "results.jsonl", "summary.md"):  # results.jsonl: no unit produced a row
        text = (tmp_path / "r" / f).read_text().lower() if (tmp_path / "r" / f).exists() or f != "results.jsonl" else ""
        assert "nan" not in text.replace("is nan", ""), f


def _write_small_dump(path, layers, tokens):
    """A fp32 dump of the given layers (dicts with name, q, k, v) with the schema's root attributes."""
    attrs = {"schema": "qattn-dump/1", "model": "test", "weights": "random", "text_source": "none", "n_tokens": tokens,
             "created_by": "pytest", "created_at": "now"}
    qattn.write_dump(path, layers, attrs, dtype="fp32")


def test_an_all_zero_reference_is_a_failed_unit(tmp_path, qattn_exe):
    # V all zero: the float64 output is zero and SQNR undefined. The unit is recorded as failed with
    # the head and the reason, the run goes on to the other layer and exits 0.
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 32, 8)).astype(np.float32)
    k = rng.standard_normal((1, 32, 8)).astype(np.float32)
    path = str(tmp_path / "z.h5")
    _write_small_dump(path, [{"name": "0", "q": q, "k": k, "v": np.zeros_like(k)}, {"name": "1", "q": q, "k": k, "v": k}], 32)
    exp = tmp_path / "e.json"
    exp.write_text(json.dumps({"name": "z", "dataset": path, "recipes": {"fp16": "q=fp16 k=fp16 p=fp16 v=fp16"}, "kl_rows": 2,
                               "output": str(tmp_path / "r")}))
    r = subprocess.run([qattn_exe, "run", str(exp), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    failed = [json.loads(x) for x in open(tmp_path / "r" / "failed.jsonl")]
    assert [(f["layer"], f["recipe"]) for f in failed] == [(0, "fp16")] and "head 0: the float64 reference output is all zeros" in failed[0]["reason"]
    rows = [json.loads(x) for x in open(tmp_path / "r" / "results.jsonl")]
    assert {x["layer"] for x in rows} == {1} and len(rows) == 2


def test_layer_names_are_numbers_only_where_they_are_plain_decimals(tmp_path, qattn_exe):
    # "12" is layer 12 in every report row; "007" (a leading zero would not print back) and
    # "attn.3" stay the dump's names; check joins a bound written as 12 or "12" to its rows.
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 16, 8)).astype(np.float32)
    k = rng.standard_normal((1, 16, 8)).astype(np.float32)
    path = str(tmp_path / "names.h5")
    _write_small_dump(path, [{"name": n, "q": q, "k": k, "v": k} for n in ("12", "007", "attn.3")], 16)
    exp = tmp_path / "e.json"
    exp.write_text(json.dumps({"name": "names", "dataset": path, "selection": {"layers": "all"}, "kl_rows": 2,
                               "recipes": {"fp16": "q=fp16 k=fp16 p=fp16 v=fp16"}, "output": str(tmp_path / "r")}))
    r = subprocess.run([qattn_exe, "run", str(exp), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in open(tmp_path / "r" / "results.jsonl")]
    assert sorted({repr(x["layer"]) for x in rows}) == ["'007'", "'attn.3'", "12"]
    for layer in (12, "12", "attn.3"):
        bounds = tmp_path / "b.json"
        bounds.write_text(json.dumps({"report": str(tmp_path / "r"), "bounds": [{"recipe": "fp16", "layer": layer, "context": 16, "sqnr_db_min": 1000}]}))
        c = subprocess.run([qattn_exe, "check", str(bounds)], capture_output=True, text=True)
        assert c.returncode == 1 and "mean SQNR" in c.stderr and "< bound 1000.00 dB" in c.stderr, (layer, c.stdout, c.stderr)


def test_inspect_says_unbounded_for_a_zero_median_channel(tmp_path, qattn_exe):
    # K with every channel but one zero: the outlier ratio over the median channel has no bound; it
    # is said in words, never printed as "inf".
    k = np.zeros((1, 16, 8), np.float32)
    k[:, :, 3] = 1.0
    q = np.ones((2, 16, 8), np.float32)
    path = str(tmp_path / "zero.h5")
    _write_small_dump(path, [{"name": "0", "q": q, "k": k, "v": k}], 16)
    r = subprocess.run([qattn_exe, "inspect", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[-1]
    assert "unbounded (median channel 0) (ch 3" in line and "inf" not in line.lower(), line
