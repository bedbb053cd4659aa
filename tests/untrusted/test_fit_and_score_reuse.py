"""fit and score as a careless user drives them: a search finishes on any valid input (a move the
input cannot take is skipped and counted), and nothing cached is reused unless what made it still
matches (dump content, function, dtype, tensor kind, layout, kernel; one kernel's outputs a fit)."""
import json
import os
import subprocess
import textwrap

import numpy as np
import pytest

import qattn

ATTRS = {"schema": "qattn-dump/1", "model": "test", "weights": "random", "text_source": "none", "n_tokens": 48,
         "created_by": "pytest", "created_at": "now"}


def small_dump(path, dim, seed=5, tokens=48):
    rng = np.random.default_rng(seed)
    layer = {"name": "0", "q": rng.standard_normal((2, tokens, dim)).astype(np.float32), "k": rng.standard_normal((1, tokens, dim)).astype(np.float32),
             "v": rng.standard_normal((1, tokens, dim)).astype(np.float32), "causal": True}
    qattn.write_dump(str(path), [layer], dict(ATTRS, n_tokens=tokens), dtype="fp32")
    return str(path)


def int8_kernel_outputs(dump, path, kernel="int8-kernel", recipe="q=int8/token k=int8/token"):
    d = qattn.load_layer(dump, "0")
    o = qattn.emulate(d["q"], d["k"], d["v"], recipe, causal=True)["out"]
    qattn.write_outputs(str(path), kernel, [{"layer": "0", "o": o.astype(np.float32)}], recipe="")
    return str(path)


@pytest.mark.parametrize("dim", [80, 1, 257])
def test_fit_finishes_when_its_own_moves_do_not_fit_the_head_dim(qattn_exe, tmp_path, dim):
    # Group sizes of 32 (llama.cpp's blocks) divide none of these head dims: fit generates those
    # moves itself, and must skip and count them, not stop.
    dump = small_dump(tmp_path / "d.h5", dim)
    outputs = int8_kernel_outputs(dump, tmp_path / "k.h5", kernel="fp16", recipe="q=fp16 k=fp16 v=fp16 p=fp16")
    out = tmp_path / "fit"
    cmd = [qattn_exe, "fit", dump, outputs, "--from", "q=int8/token k=int8/token", "-o", str(out), "--rows", "0", "--beam", "1", "-q"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode in (0, 1) and p.stderr == "", p.stderr  # 0: the rule met, 1: not met; either way a report
    report = json.load(open(out / "fit.json"))
    assert report["skipped"] > 0 and any("must divide the head dim" in why for why in report["skipped_why"]), report
    assert "do not apply to this input and were skipped" in (out / "summary.md").read_text()
    invalid = [json.loads(l) for l in open(out / "candidates.jsonl") if '"invalid"' in l]
    assert invalid and all(r["failed"] for r in invalid)
    # --resume reads the skipped candidates back and finishes the same way.
    p = subprocess.run(cmd[:-1] + ["--resume", "-q"], capture_output=True, text=True)
    assert p.returncode in (0, 1) and p.stderr == "", p.stderr
    assert json.load(open(out / "fit.json"))["skipped"] == report["skipped"]


def test_fit_refuses_two_kernels_and_a_file_given_twice(qattn_exe, tmp_path):
    dump = small_dump(tmp_path / "d.h5", 16)
    a = int8_kernel_outputs(dump, tmp_path / "a.h5", kernel="a")
    b = int8_kernel_outputs(dump, tmp_path / "b.h5", kernel="b")
    for files, message in (([a, b], "holds kernel 'b' and " + a + " kernel 'a'; expected the outputs of one kernel"),
                           ([a, a], "layer 0 context 48 is given twice (also in " + a + ")")):
        p = subprocess.run([qattn_exe, "fit", dump, *files, "--from", "q=int8/token", "-o", str(tmp_path / "f"), "-q"], capture_output=True, text=True)
        assert p.returncode == 1 and message in p.stderr, p.stderr
        assert not (tmp_path / "f").exists()  # refused before the folder is made


@pytest.mark.parametrize("row, message", [
    ("not json\n", "candidates.jsonl: line 2: not a JSON object"),
    ('{"line": "q=int8", "kernel_vs_recipe_db": "nan", "recipe_vs_float64_db": 20}\n', "line 2: key 'kernel_vs_recipe_db': \"nan\"; expected a finite"),
    ('{"line": 3, "kernel_vs_recipe_db": 1, "recipe_vs_float64_db": 20}\n', "line 2: key 'line': 3; expected the recipe's line"),
    ('{"line": "q=int8", "recipe_vs_float64_db": 20}\n', "line 2: key 'kernel_vs_recipe_db': absent"),
])
def test_a_corrupt_candidates_log_is_one_clear_error(qattn_exe, tmp_path, row, message):
    dump = small_dump(tmp_path / "d.h5", 16)
    outputs = int8_kernel_outputs(dump, tmp_path / "k.h5")
    out = tmp_path / "fit"
    cmd = [qattn_exe, "fit", dump, outputs, "--from", "q=int8/token k=int8/token", "-o", str(out), "--rows", "0", "--budget", "5", "-q"]
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    log = out / "candidates.jsonl"
    first = log.read_text().splitlines()[0]
    log.write_text(first + "\n" + row)
    p = subprocess.run(cmd + ["--resume"], capture_output=True, text=True)
    assert p.returncode == 1 and message in p.stderr and "nan dB" not in p.stdout, p.stderr
    assert "Traceback" not in p.stderr and "json.exception" not in p.stderr


def test_negative_seed_is_refused_not_wrapped(qattn_exe, tmp_path):
    dump = small_dump(tmp_path / "d.h5", 16)
    outputs = int8_kernel_outputs(dump, tmp_path / "k.h5")
    p = subprocess.run([qattn_exe, "fit", dump, outputs, "-o", str(tmp_path / "f"), "--seed", "-1"], capture_output=True, text=True)
    assert p.returncode != 0 and "--seed: -1: expected an integer in 0..2^64-1" in p.stderr, p.stderr
    with pytest.raises(ValueError, match=r"seed=-1; expected an integer in 0..2\^64-1"):
        qattn.fit(outputs, dump, output=str(tmp_path / "g"), start="q=int8/token k=int8/token", seed=-1)


def attention(q, k, v, *, causal, window, softmax_scale):
    return qattn.reference(np.asarray(q, np.float32), np.asarray(k, np.float32), np.asarray(v, np.float32), causal=causal,
                           softmax_scale=softmax_scale)["out"].astype(np.float32)


def half_attention(q, k, v, *, causal, window, softmax_scale):
    return qattn.emulate(q, k, v, "q=fp16 k=fp16 v=fp16 p=fp16 out=fp16", causal=causal, softmax_scale=softmax_scale)["out"].astype(np.float32)


def kernel_sqnr(rows):
    return rows[0]["sqnr_db"]


def test_score_resume_recomputes_what_another_call_made(tmp_path, capfd):
    dump = small_dump(tmp_path / "d.h5", 16)
    out = str(tmp_path / "s")
    first = qattn.score(attention, dump, output=out, kernel="k", progress=False)
    # Another dtype handed to the same function: computed again, and stderr says why.
    qattn.score(attention, dump, output=out, kernel="k", resume=True, dtype="float16", progress=False)
    assert "made with dtype 'float32', now 'float16'" in capfd.readouterr().err
    # The same name, another function: computed again.
    other = qattn.score(half_attention, dump, output=out, kernel="k", resume=True, dtype="float16", progress=False)
    assert "made with function" in capfd.readouterr().err
    # fp16 rounding (about 60 dB) was scored, not the float32-rounded reference (about 140 dB).
    assert kernel_sqnr(other) < kernel_sqnr(first) - 20
    # Another dump at the same path: computed again (its content hash differs).
    small_dump(tmp_path / "d.h5", 16, seed=9)
    again = qattn.score(half_attention, dump, output=out, kernel="k", resume=True, dtype="float16", progress=False)
    assert "made with dataset_sha256" in capfd.readouterr().err
    # The function's outputs on the dump there now: fp16's error, about 60 dB (a stale file from
    # the other dump would score near 0 dB).
    assert kernel_sqnr(again) > 40
    # Nothing differs: reused, not written again.
    before = os.stat(os.path.join(out, "outputs", "k-ctx48.h5")).st_mtime_ns
    qattn.score(half_attention, dump, output=out, kernel="k", resume=True, dtype="float16", progress=False)
    assert os.stat(os.path.join(out, "outputs", "k-ctx48.h5")).st_mtime_ns == before
    assert "calling the function again" not in capfd.readouterr().err


def batched(q, k, v, *, causal, window, softmax_scale):
    return attention(q[0], k[0], v[0], causal=causal, window=window, softmax_scale=softmax_scale)[None]


def test_score_resume_recomputes_another_layout_or_tensor_kind(tmp_path, capfd):
    dump = small_dump(tmp_path / "d.h5", 16)
    out = str(tmp_path / "s")
    qattn.score(batched, dump, output=out, kernel="k", layout="BHND", progress=False)
    qattn.score(attention, dump, output=out, kernel="k", resume=True, progress=False)
    assert "made with function" in capfd.readouterr().err  # another function, and another layout
    qattn.score(batched, dump, output=out, kernel="k", resume=True, layout="BHND", progress=False)
    assert "made with" in capfd.readouterr().err
    # Only the layout differs: a function that takes either.
    either = lambda q, k, v, **kw: batched(q, k, v, **kw) if q.ndim == 4 else attention(q, k, v, **kw)  # noqa: E731
    qattn.score(either, dump, output=out, kernel="k", force=True, progress=False)
    qattn.score(either, dump, output=out, kernel="k", resume=True, layout="BHND", progress=False)
    assert "made with layout 'HND', now 'BHND'" in capfd.readouterr().err
    # The tensor kind: torch lives in the dumper's environment (scripts/install-dumper.sh).
    python = os.path.join(os.path.dirname(__file__), "..", "..", ".venv-dump", "bin", "python")
    assert os.path.exists(python), f"{python}: run scripts/install-dumper.sh"
    script = textwrap.dedent("""
        import sys, numpy as np, qattn
        def either(q, k, v, **kw):
            a = [np.asarray(x.float()) if hasattr(x, "float") else x for x in (q, k, v)]
            return qattn.reference(*a, causal=kw["causal"], softmax_scale=kw["softmax_scale"])["out"].astype(np.float32)
        qattn.score(either, sys.argv[1], output=sys.argv[2], kernel="k", progress=False)
        qattn.score(either, sys.argv[1], output=sys.argv[2], kernel="k", resume=True, tensor="torch", progress=False)
    """)
    p = subprocess.run([python, "-c", script, dump, str(tmp_path / "t")], capture_output=True, text=True)
    assert p.returncode == 0 and "made with tensor 'numpy', now 'torch'" in p.stderr, p.stderr


def test_fit_force_fits_only_the_new_kernel(dump, tmp_path):
    small = small_dump(tmp_path / "d.h5", 16)
    out = str(tmp_path / "f")
    qattn.fit(attention, small, output=out, start="q=int8/token k=int8/token", name="a", rows=0, budget=5)
    r = qattn.fit(half_attention, small, output=out, start="q=int8/token k=int8/token", name="b", rows=0, budget=30, force=True)
    assert os.listdir(os.path.join(out, "kernel", "outputs")) == ["b-ctx48.h5"]  # kernel a's outputs went with force
    config = json.load(open(os.path.join(out, "config.json")))
    assert [o["kernel"] for o in config["outputs"]] == ["b"]
    assert r["evaluated"] > 0


@pytest.mark.parametrize("kw, message", [
    (dict(dtype="bogus"), "dtype='bogus'; expected one of float16, float32, float64 for tensor='numpy'"),
    (dict(dtype="int8"), "dtype='int8'; expected one of"),
    (dict(tensor="jax"), "tensor='jax'; expected 'numpy' or 'torch'"),
    (dict(rows="all"), r"rows='all' \(str\); expected a positive number of query rows"),
    (dict(seed=-1), r"seed=-1; expected an integer in 0..2\^64-1"),
    (dict(force="yes"), r"force='yes' \(str\); expected True or False"),
])
def test_score_arguments_are_checked_before_any_work(tmp_path, kw, message):
    dump = small_dump(tmp_path / "d.h5", 16)
    with pytest.raises(ValueError, match=message):
        qattn.score(attention, dump, output=str(tmp_path / "s"), **kw)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("kw, message", [
    (dict(rows="32"), r"rows='32' \(str\); expected a number of query rows"),
    (dict(beam=2.5), r"beam=2.5 \(float\); expected a count in 1..64"),
    (dict(budget=True), r"budget=True; expected a positive number of seconds"),
    (dict(name="x"), "name: options of an attention function; kernel is outputs files here"),
])
def test_fit_arguments_are_named_as_the_caller_wrote_them(tmp_path, kw, message):
    dump = small_dump(tmp_path / "d.h5", 16)
    outputs = int8_kernel_outputs(dump, tmp_path / "k.h5")
    with pytest.raises(ValueError, match=message) as e:
        qattn.fit(outputs, dump, output=str(tmp_path / "f"), start="q=int8/token k=int8/token", **kw)
    assert "fit_files" not in str(e.value)


def test_fit_takes_the_kernel_name_of_a_function(tmp_path):
    dump = small_dump(tmp_path / "d.h5", 16)
    r = qattn.fit(attention, dump, output=str(tmp_path / "f"), start="q=int8/token k=int8/token", name="mine", rows=0, budget=5)
    assert r["evaluated"] > 0
    assert os.listdir(tmp_path / "f" / "kernel" / "outputs") == ["mine-ctx48.h5"]


def test_a_torch_kernel_returning_integers_is_refused(tmp_path):
    # torch lives in the dumper's environment (scripts/install-dumper.sh, which the README's test
    # command runs); the check runs there, on this build's package.
    python = os.path.join(os.path.dirname(__file__), "..", "..", ".venv-dump", "bin", "python")
    assert os.path.exists(python), f"{python}: run scripts/install-dumper.sh"
    dump = small_dump(tmp_path / "d.h5", 16)
    script = textwrap.dedent("""
        import sys, torch, qattn
        dump, out = sys.argv[1], sys.argv[2]
        for i, dt in enumerate((torch.int32, torch.bool, torch.complex64)):
            def kernel(q, k, v, *, causal, window, softmax_scale, dt=dt):
                return torch.zeros(q.shape, dtype=dt)
            try:
                qattn.score(kernel, dump, output=f"{out}{i}", tensor="torch", progress=False)
                print("scored", dt)
            except ValueError as e:
                print(e)
    """)
    p = subprocess.run([python, "-c", script, dump, str(tmp_path / "s")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3, p.stdout
    for line, dt in zip(lines, ("torch.int32", "torch.bool", "torch.complex64")):
        assert f"returned a torch tensor of dtype {dt}; expected a floating-point tensor" in line, line
