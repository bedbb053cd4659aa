"""Scoring kernels the lab did not write: qattn.score on a Python function, `qattn score` on an
outputs file, and `qattn check` gating them. The "kernels" here are plain NumPy attention, one
honest (float32) and one broken on purpose (it never sees keys 64..127: a dropped key tile)."""
import json
import os
import subprocess

import numpy as np
import pytest

import qattn


def numpy_attention(q, k, v, *, causal, window, softmax_scale, drop=None):
    hq, n, d = q.shape
    g = hq // k.shape[0]
    kk, vv = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    s = np.einsum("hid,hjd->hij", q, kk).astype(np.float32) * np.float32(softmax_scale)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    mask = np.ones((n, n), bool)
    if causal:
        mask &= j <= i
    if window:
        mask &= (i - j < window) & (j - i < window)
    if drop is not None:
        keep = (j < drop[0]) | (j >= drop[1])
        mask &= keep | (j == 0)  # every row keeps key 0, so no row is empty
    s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return (np.einsum("hij,hjd->hid", p, vv) / p.sum(axis=2, keepdims=True)).astype(np.float32)


def fp32_kernel(q, k, v, **kw):
    return numpy_attention(q, k, v, **kw)


def broken_kernel(q, k, v, **kw):
    return numpy_attention(q, k, v, drop=(64, 128), **kw)


def test_python_score_separates_kernel_and_format_error(dump, tmp_path, capfd):
    out = str(tmp_path / "fp32")
    rows = qattn.score(fp32_kernel, dump, layers=[0, "15"], contexts=[128, 256], recipe="q=fp32", output=out)
    # Progress on stderr: each kernel call, then each scored unit, the last with nothing left to wait for.
    err = capfd.readouterr().err.splitlines()
    assert any(x.startswith("score: [4/4] fp32_kernel on layer 15, context 256") for x in err), err
    assert any(x.startswith("[4/4] fp32_kernel layer 15 ctx 256:") and x.endswith("(ETA 0 s)") for x in err), err
    assert len(rows) == 2 * 2 * 9  # layers x contexts x heads
    for r in rows:
        assert r["kernel"] == "fp32_kernel" and r["rows"] == r["context"]
        assert r["sqnr_db"] > 100  # float32 attention against float64
        assert r["recipe_sqnr_db"] > 100 and r["kernel_vs_recipe_sqnr_db"] > 100
    for f in ("config.json", "results.jsonl", "results.csv", "summary.md", "figures/score_per_head.csv"):
        assert os.path.exists(os.path.join(out, f)), f
    assert len(os.listdir(os.path.join(out, "outputs"))) == 2  # one outputs file per context, kept

    bad = qattn.score(broken_kernel, dump, layers=["15"], contexts=[256], recipe="q=fp32", output=str(tmp_path / "broken"))
    own = [r["kernel_vs_recipe_sqnr_db"] for r in bad]
    assert max(own) < 40, own  # the dropped tile is the kernel's own error, not its formats'
    assert min(r["recipe_sqnr_db"] for r in bad) > 100

    capfd.readouterr()
    sampled = qattn.score(fp32_kernel, dump, layers=["15"], contexts=[256], rows=32, output=str(tmp_path / "s"), progress=False)
    assert "score: [" not in capfd.readouterr().err
    assert all(r["rows"] == 32 and r["recipe_sqnr_db"] is None for r in sampled)
    with pytest.raises(ValueError, match="exists"):
        qattn.score(fp32_kernel, dump, layers=["15"], contexts=[256], output=out)


def test_score_function_errors(dump, tmp_path):
    with pytest.raises(ValueError, match="returned shape"):
        qattn.score(lambda q, k, v, **kw: q[:, :-1], dump, layers=["0"], contexts=[64], output=str(tmp_path / "a"))
    with pytest.raises(ValueError, match="expected finite"):
        qattn.score(lambda q, k, v, **kw: q * np.nan, dump, layers=["0"], contexts=[64], output=str(tmp_path / "b"))
    with pytest.raises(ValueError, match="no layer '3'"):
        qattn.score(fp32_kernel, dump, layers=[3], output=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="contexts"):
        qattn.score(fp32_kernel, dump, contexts=[4096], output=str(tmp_path / "d"))
    with pytest.raises(ValueError, match="recipe|granularity"):
        qattn.score(fp32_kernel, dump, contexts=[64], recipe="q=int8/sometimes", output=str(tmp_path / "e"))


def write_kernel_outputs(dump, path, fn, kernel, context, rows=None):
    layers = []
    for name in ("0", "15"):
        d = qattn.load_layer(dump, name, tokens=context)
        o = fn(d["q"], d["k"], d["v"], causal=d["causal"], window=d["window"], softmax_scale=d["softmax_scale"])
        entry = {"layer": name, "o": o if rows is None else o[:, rows, :], "context": context}
        if rows is not None:
            entry["rows"] = np.array(rows, dtype=np.int32)
        layers.append(entry)
    qattn.write_outputs(path, kernel, layers, recipe="q=bf16 k=bf16 p=bf16 v=bf16", dtype="fp32")


def test_cli_score_and_check_gate_a_broken_kernel(dump, qattn_exe, tmp_path):
    good, bad = str(tmp_path / "good.h5"), str(tmp_path / "bad.h5")
    write_kernel_outputs(dump, good, fp32_kernel, "my_kernel", 256)
    write_kernel_outputs(dump, bad, broken_kernel, "my_kernel", 256, rows=list(range(0, 256, 4)))
    back = qattn.read_outputs(bad)
    assert back["kernel"] == "my_kernel" and back["layers"][0]["rows"].shape == (64,)

    report = str(tmp_path / "report")
    r = subprocess.run([qattn_exe, "score", dump, good, "--output", report], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "| my_kernel | 15 | 256 | 256 | 9 |" in r.stdout
    bounds = str(tmp_path / "bounds.json")
    json.dump({"report": report, "bounds": [{"recipe": "my_kernel", "layer": "15", "context": 256, "sqnr_db_min": 0}]}, open(bounds, "w"))
    assert subprocess.run([qattn_exe, "check", bounds, "--update"], capture_output=True, text=True).returncode == 0
    stored = json.load(open(bounds))
    assert {b["layer"] for b in stored["bounds"]} == {0, 15}  # numbers where the name is one
    assert all("kernel_vs_recipe_db_min" in b and "kl_max" not in b for b in stored["bounds"])
    ok = subprocess.run([qattn_exe, "check", bounds], capture_output=True, text=True)
    assert ok.returncode == 0 and "0 violation(s)" in ok.stdout, ok.stdout + ok.stderr

    # The broken kernel scored into the same report folder, then gated by the stored bounds.
    # (quietly: nothing on stdout, the figure's name included, and the figure still drawn)
    os.remove(os.path.join(report, "figures", "score_per_head.png"))
    r = subprocess.run([qattn_exe, "score", dump, bad, "--output", report, "--force", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and os.path.exists(os.path.join(report, "figures", "score_per_head.png")), r.stdout
    fail = subprocess.run([qattn_exe, "check", bounds], capture_output=True, text=True)
    assert fail.returncode == 1
    assert "FAIL recipe 'my_kernel' layer 15 context 256: mean SQNR" in fail.stderr and "worse by" in fail.stderr, fail.stderr
    assert "kernel vs recipe" in fail.stderr and "own error grew" in fail.stderr


def test_cli_score_errors(dump, qattn_exe, tmp_path):
    def err(*args):
        r = subprocess.run([qattn_exe, "score", *args], capture_output=True, text=True)
        assert r.returncode != 0
        return r.stderr

    out = str(tmp_path / "o.h5")
    qattn.write_outputs(out, "k", [{"layer": "7", "o": np.zeros((8, 16, 64), np.float32)}])
    assert "8 heads; the dump's layer has 9 query heads" in err(dump, out, "-o", str(tmp_path / "r"))
    qattn.write_outputs(out, "k", [{"layer": "5", "o": np.zeros((9, 16, 64), np.float32)}])
    assert "has no such layer; expected one of 0, 7, 15, 22, 29" in err(dump, out, "-o", str(tmp_path / "r"))
    # The writer reads its file back with the reader's rules: a row outside the context is refused there.
    with pytest.raises(ValueError, match="row 9 is outside the context of 8 tokens"):
        qattn.write_outputs(out, "k", [{"layer": "7", "o": np.zeros((9, 3, 64), np.float32), "rows": [0, 1, 9], "context": 8}])
    assert "schema" in err(dump, dump, "-o", str(tmp_path / "r"))  # a dump is not an outputs file
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    qattn.write_outputs(out, "k", [{"layer": "7", "o": np.zeros((9, 16, 64), np.float32)}])
    assert "not a report folder qattn wrote" in err(dump, out, "-o", str(user), "--force")
    assert (user / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="not finite"):
        qattn.write_outputs(out, "k", [{"layer": "7", "o": np.full((9, 16, 64), np.inf, np.float32)}])


def test_a_recipe_without_defined_outputs_is_reported_failed_not_nan(dump, qattn_exe, tmp_path):
    out = str(tmp_path / "o.h5")
    write_kernel_outputs(dump, out, fp32_kernel, "my_kernel", 128)
    report = str(tmp_path / "r")
    # P at a static scale of 0.001 flushes every P: the emulation is 0 / 0 in every row.
    r = subprocess.run([qattn_exe, "score", dump, out, "--recipe", "q=int8/token k=int8/token p=int8/static:0.001", "-o", report],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "the recipe's emulation gives NaN" in r.stderr, r.stderr
    rows = [json.loads(line) for line in open(os.path.join(report, "results.jsonl"))]
    assert all(x["recipe_sqnr_db"] is None and "every P flushed" in x["recipe_failed"] for x in rows)
    assert all(x["sqnr_db"] > 100 for x in rows)  # the kernel's own measurement is kept
    for name in ("results.jsonl", "results.csv", "summary.md", os.path.join("figures", "score_per_head.csv")):
        text = open(os.path.join(report, name)).read()
        assert '"nan"' not in text and "-nan" not in text and ",nan" not in text, name


def test_an_end_to_end_report_is_a_report_folder_of_the_same_rules(tmp_path):
    """The end-to-end evaluation claims its folder as run and score do: its config makes the folder
    a report, force removes the report's own files and its units/, and a user's file stays."""
    out = tmp_path / "e2e"
    (out / "units" / "c128" / "w0").mkdir(parents=True)
    (out / "units" / "c128" / "w0" / "fp32.npz").write_bytes(b"x")
    (out / "config.json").write_text(json.dumps({"schema": "qattn-model-eval/1", "experiment": {}, "provenance": {}}))
    (out / "results.jsonl").write_text("{}\n")
    (out / "notes.txt").write_text("mine")
    with qattn._core.claim_report_for(str(out), "test", force=True, resume=False):
        left = sorted(p.name for p in out.iterdir())
    assert left == [".lock", ".qattn-report", "figures", "notes.txt"], left
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="is not a report folder qattn wrote"):
        qattn._core.claim_report_for(str(other), "test", force=True, resume=False)
    lock_only = tmp_path / "lock-only"
    lock_only.mkdir()
    (lock_only / ".lock").write_text("")
    with qattn._core.claim_report_for(str(lock_only), "test", force=False, resume=True):
        pass  # a claim that stopped before it wrote anything leaves a folder that is taken as empty


def variant_dump(path):
    """One causal layer with every variant: soft-cap 4 (Q scaled so scores pass it), a sink per head,
    chunks of 48 of 128 tokens, and V's head dim 32 against Q/K's 48 (schema 2)."""
    rng = np.random.default_rng(3)
    hq, hkv, n, d, dv = 4, 2, 128, 48, 32
    layer = dict(name="0", q=(rng.standard_normal((hq, n, d)) * 3).astype(np.float32), k=rng.standard_normal((hkv, n, d)).astype(np.float32),
                 v=rng.standard_normal((hkv, n, dv)).astype(np.float32), causal=True, softmax_scale=d ** -0.5, softcap=4.0,
                 sinks=[0.5, -1.0, 2.0, 0.0], attention_chunk=48)
    attrs = dict(schema="qattn-dump/2", model="random", weights="none", text_source="none", n_tokens=n, created_by="tests",
                 created_at="2026-12-07T00:00:00Z")
    qattn.write_dump(str(path), [layer], attrs, dtype="fp32")
    return str(path)


BF16 = "q=bf16 k=bf16 v=bf16 p=bf16"


def test_score_and_fit_apply_the_layers_attention_variants(tmp_path):
    dump = variant_dump(tmp_path / "v2.h5")

    def kernel(q, k, v, *, causal, window, softmax_scale, softcap=0.0, sinks=None, chunk=0):
        return qattn.emulate(q, k, v, BF16, causal=causal, window=window, softmax_scale=softmax_scale, softcap=softcap, sinks=sinks,
                             chunk=chunk)["out"]

    rows = qattn.score(kernel, dump, recipe=BF16, output=str(tmp_path / "s"), progress=False)
    assert len(rows) == 4
    for r in rows:
        assert r["kernel_vs_recipe_sqnr_db"] == "inf"  # the recipe's emulation with the variants is the kernel, bit for bit
        assert r["recipe_sqnr_db"] > 40  # bf16 operands: ~50 dB measured

    def plain(q, k, v, *, causal, window, softmax_scale, **ignored):
        return qattn.emulate(q, k, v, BF16, causal=causal, window=window, softmax_scale=softmax_scale)["out"]

    # A kernel that ignores the variants is far from the recipe (-1 to -2 dB measured): the score sees them.
    assert max(r["kernel_vs_recipe_sqnr_db"] for r in qattn.score(plain, dump, recipe=BF16, output=str(tmp_path / "p"), progress=False)) < 10
    with pytest.raises(TypeError, match="softcap"):  # one written for plain attention is told, never run as plain
        qattn.score(fp32_kernel, dump, output=str(tmp_path / "t"), progress=False)

    f = qattn.fit(kernel, dump, start=BF16, output=str(tmp_path / "f"), budget=60, quiet=True)
    assert f["meets_rule"] and f["path"][0]["kernel_vs_recipe_db"] == float("inf")
    assert any("soft-caps its logits, which recipe softmax=qflash does not model" in why for why in f["skipped_why"])
