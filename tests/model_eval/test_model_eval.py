"""qattn.model_eval on SmolLM2 at 256 tokens: the hook reproduces the model, the float64 control is
exact, int8 P is measurably worse than e4m3 P, an interrupted run resumes to identical rows, and bad
input is refused before any work. Runs in the dumper's environment (torch, transformers)."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import qattn
from qattn import model_eval as me

FP32 = "q=fp32 k=fp32 p=fp32 v=fp32"
P_INT8 = "q=fp32 k=fp32 p=int8/static:127 v=fp32"
P_E4M3 = "q=fp32 k=fp32 p=e4m3/static:448 v=fp32"


@pytest.fixture(scope="module")
def smollm2():
    """The model and its facts converted from the GGUF file now, bypassing the converted cache."""
    facts = me.model_facts("smollm2", cache=False)
    return me._model("smollm2", cache=False), facts


def test_the_converted_cache_reads_back_what_the_gguf_converts_to(smollm2):
    model, facts = smollm2
    me.model_facts("smollm2"), me._model("smollm2")  # written to the cache if not there yet
    for key in [k for k in me._LOADED if k[-1] is True]:
        del me._LOADED[key]  # so that the next calls read the cache folder
    cached_facts, cached = me.model_facts("smollm2"), me._model("smollm2")
    assert cached is not model and cached_facts is not facts
    assert np.array_equal(cached_facts["ids"], facts["ids"]) and cached_facts["bos"] == facts["bos"]
    drop = {"_name_or_path"}  # where each was read from
    assert ({k: v for k, v in cached_facts["config"].to_dict().items() if k not in drop}
            == {k: v for k, v in facts["config"].to_dict().items() if k not in drop})
    import torch

    a, b = model.state_dict(), cached.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bit for bit, tied weights included
    ids = torch.tensor(facts["ids"][:64])[None]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, cached(ids).logits)


def test_fp32_recipe_reproduces_the_models_own_logits(smollm2):
    model, facts = smollm2
    ids = facts["ids"][:256]
    h_own, _ = me.hidden_states(model, ids, None)
    h_fp32, seconds = me.hidden_states(model, ids, me._Plan({"global": FP32, "sliding": FP32}, None, "emulate", 2))
    assert seconds > 0  # the lab's attention ran
    own, fp32 = me.logits(model, h_own).numpy(), me.logits(model, h_fp32).numpy()
    # Both are float32 attention, summed in different orders (the emulator's 64-key tiles vs torch's
    # SDPA): ~1e-6 relative per layer, grown through 30 layers to ~1e-4 of the logits' size; 1e-3
    # fails on any real difference (a wrong mask, scale or head mapping moves logits by whole units).
    rel = np.abs(own - fp32).max() / np.abs(own).max()
    assert rel < 1e-3, rel


def test_float64_control_is_exact_and_int8_p_is_worse_than_e4m3(tmp_path):
    exp = {"name": "t", "model": "smollm2", "contexts": [256], "windows": 2,
           "recipes": {"float64 control": "reference", "int8 P 127": P_INT8, "e4m3 P 448": P_E4M3},
           "buckets": [0, 64], "output": str(tmp_path / "r")}
    rows = {r["recipe"]: r for r in me.run(exp, quiet=True)}
    assert set(rows) == {"float64", "model", "float64 control", "int8 P 127", "e4m3 P 448"}
    control = rows["float64 control"]
    # The same float64 attention in a second forward pass: identical logits, so KL is exactly 0.
    assert control["kl_mean"] == 0.0 and control["kl_p99"] == 0.0 and control["top1_agree"] == 1.0
    assert control["ppl"] == control["ppl_float64"] and control["positions"] == 2 * 255
    bad, good = rows["int8 P 127"], rows["e4m3 P 448"]
    assert bad["kl_mean"] > 2 * good["kl_mean"], (bad["kl_mean"], good["kl_mean"])
    assert bad["top1_agree"] < good["top1_agree"]
    for r in rows.values():
        assert all(not (isinstance(v, float) and not np.isfinite(v)) for v in r.values()), r
    assert [b["start"] for b in bad["kl_by_bucket"]] == [0, 64]
    for f in ("config.json", "results.jsonl", "results.csv", "summary.md", "figures/kl_by_position.csv",
              "figures/ppl_vs_context.csv", "figures/kl_by_position.png", "figures/ppl_vs_context.png"):
        assert (tmp_path / "r" / f).exists(), f
    assert not list((tmp_path / "r" / "units").rglob("*.hidden"))  # the forward passes' files are removed at the end


def _cli(path, *args):
    env = dict(os.environ)
    return subprocess.Popen([sys.executable, "-m", "qattn.model_eval", str(path), "--quiet", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows(folder):
    with open(folder / "results.jsonl") as f:
        rows = [json.loads(line) for line in f]
    for r in rows:  # wall times differ between runs; everything else must not
        del r["seconds"], r["attention_seconds"]
    return rows


def _three_windows(folder, out):
    """The interrupted and sharded runs' experiment: 3 windows of 128 tokens, two recipes."""
    path = folder / f"{out}.json"
    path.write_text(json.dumps({"name": "resume", "model": "smollm2", "contexts": [128], "windows": 3,
                                "recipes": {"int8 P": P_INT8, "e4m3 P": P_E4M3}, "output": str(folder / out)}))
    return path


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted single-process report of _three_windows, run once in this process."""
    folder = tmp_path_factory.mktemp("whole")
    me.run(str(_three_windows(folder, "whole")), quiet=True)
    return folder / "whole"


def test_an_interrupted_run_resumes_to_identical_rows(tmp_path, whole):
    def experiment(out):
        return _three_windows(tmp_path, out)
    cut = _cli(experiment("cut"))
    units = tmp_path / "cut" / "units"
    # Killed while window 1's forward passes are under way: window 0's four units are written, some
    # of window 1's passes are kept in .hidden files, nothing of the report exists yet.
    deadline = time.time() + 600
    while time.time() < deadline and cut.poll() is None and not (
            len(list(units.rglob("*.npz"))) >= 4 and list((units / "c128" / "w1").glob("*.hidden"))):
        time.sleep(0.05)
    cut.send_signal(signal.SIGKILL)
    cut.wait()
    done = {p: p.stat().st_mtime_ns for p in units.rglob("*.npz")}
    assert 4 <= len(done) < 12 and not (tmp_path / "cut" / "results.jsonl").exists()
    resumed = _cli(experiment("cut"))
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read()
    assert all(p.stat().st_mtime_ns == t for p, t in done.items())  # finished units were not redone
    assert _rows(tmp_path / "cut") == _rows(whole)


def test_mpirun_shards_windows_to_identical_rows(tmp_path, whole):
    # mpirun -n 2 splits the 3 windows over two ranks (window 0 on rank 0, 1 and 2 on rank 1); then,
    # with window 1's units removed (what a run killed there leaves), one process without mpirun
    # completes it. Both reports equal the uninterrupted single-process rows.
    import shutil

    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun not found: scripts/install-deps.sh installs Open MPI"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    path = _three_windows(tmp_path, "shards")

    def sharded(n):
        r = subprocess.run([mpirun, "-n", str(n), "--oversubscribe", sys.executable, "-m", "qattn.model_eval", str(path)],
                           capture_output=True, text=True, env=env, timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
        return r

    r = sharded(2)
    assert "rank 0 of 2: context 128, window 0" in r.stderr and "rank 1 of 2: context 128, window 2" in r.stderr
    assert r.stdout.count("# resume") == 1  # rank 0 alone prints the summary
    assert _rows(tmp_path / "shards") == _rows(whole)
    for f in (tmp_path / "shards" / "units" / "c128" / "w1").glob("*.npz"):
        f.unlink()
    (tmp_path / "shards" / "results.jsonl").unlink()
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "shards" / "units").rglob("*.npz")}
    me.run(str(path), quiet=True)
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # windows 0 and 2 were not redone
    assert len(list((tmp_path / "shards" / "units" / "c128" / "w1").glob("*.npz"))) == len(before) // 2
    assert _rows(tmp_path / "shards") == _rows(whole)


@pytest.mark.parametrize("change,message", [
    ({"model": "llama9"}, r"\$\.model: 'llama9'; expected one of gemma3, smollm2"),
    ({"contexts": [9000]}, r"\$\.contexts\[0\]: 9000 tokens; SmolLM2-135M-Instruct supports at most 8192"),
    ({"contexts": [8192], "windows": 14}, r"\$\.contexts\[0\]: 14 window\(s\) of 8192 tokens need .* tokens; the text has 112483"),
    ({"backend": "gpu"}, r"\$\.backend: 'gpu', but this qattn was built without GPU kernels"),
    ({"recipes": {"x": "q=int9"}}, r"\$\.recipes\[\"x\"\]: .*int9"),
    ({"recipe": "q=fp32"}, r"\$\.recipe: unknown key"),
    ({"layers": [30]}, r"\$\.layers\[0\]: 30; SmolLM2-135M-Instruct has layers 0\.\.29"),
    ({"windows": [1, 2]}, r"\$\.windows: .*2 counts for 1 contexts"),
    ({"model_attention": "no"}, r"\$\.model_attention: \"no\"; expected true or false"),
    ({"text": "/nonexistent/text.txt"}, r"\$\.text: '/nonexistent/text.txt' is not a file"),
    ({"device": "tpu"}, r"\$\.device: \"tpu\"; expected 'cpu' or 'cuda'"),
    ({"device": "cuda"}, r"\$\.device: 'cuda', but torch sees no GPU here"),
])
def test_bad_input_is_refused_before_any_work(tmp_path, change, message):
    if change.get("backend") == "gpu" and qattn.gpu_available():
        pytest.skip("this build has GPU kernels")
    if change.get("device") == "cuda" and _cuda():
        pytest.skip("torch sees a GPU here")
    exp = {"name": "bad", "model": "smollm2", "contexts": [128], "recipes": {"fp32": FP32}, "output": str(tmp_path / "o")}
    exp.update(change)
    with pytest.raises(ValueError, match=message):
        me.run(exp, quiet=True, path="bad.json")
    assert not (tmp_path / "o").exists()


def test_torch_after_qattn_imports():
    # qattn imports torch first where torch is installed: on the H200 machine's Python the other
    # order aborted inside torch's initialization.
    code = "import qattn, torch; print(float(torch.ones(2).sum()))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "2.0", p.stderr[-2000:]


def test_force_under_another_writer_changes_nothing(tmp_path):
    """--force takes the folder's lock before it removes anything: with another writer holding it
    (any of qattn run, score or model_eval: one flock protocol), nothing in the folder changes."""
    import fcntl

    out = tmp_path / "o"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"schema": me.SCHEMA, "experiment": {"name": "older"}}))
    (out / "results.jsonl").write_text('{"recipe": "older"}\n')
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    exp = {"name": "t", "model": "smollm2", "contexts": [128], "recipes": {"fp32": FP32}, "output": str(out)}
    with open(out / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ValueError, match="another qattn command is writing this report folder; nothing in it was changed"):
            me.run(exp, quiet=True, force=True, path="t.json")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".lock"} == {k: v for k, v in before.items()}


def test_output_that_is_a_file_or_read_only_is_one_error(tmp_path):
    exp = {"name": "t", "model": "smollm2", "contexts": [128], "recipes": {"fp32": FP32}, "output": str(tmp_path / "o")}
    (tmp_path / "o").write_text("a file")
    path = tmp_path / "e.json"
    path.write_text(json.dumps(exp))
    p = _cli(path)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 2 and "is a file; expected a folder for the report" in err, err[-2000:]
    if os.geteuid() == 0:
        return  # root writes through any mode bits: a read-only folder cannot be made here
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    exp["output"] = str(ro / "deeper" / "o")
    path.write_text(json.dumps(exp))
    p = _cli(path)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 2 and "Permission denied" in err and "Traceback" not in err, err[-2000:]


def test_a_checkpoint_directory_with_a_soft_cap(tmp_path):
    """A user's own checkpoint (a tiny random Gemma 2, its soft-cap set near its scores so tanh bends
    them) evaluated end to end: the model's own attention (its eager path: transformers' SDPA drops the
    cap) agrees with the lab's float64 reference, which applies the cap, to float32 noise."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "datasets"))
    from tiny_checkpoints import checkpoint, tokenizer_for

    text, _ = me._models.prose_text()
    ckpt = checkpoint("gemma2", {"head_dim": 16, "attn_logit_softcapping": 0.02}, tmp_path / "gemma2", tokenizer_for(text[:20000]))
    exp = {"name": "mine", "model": str(ckpt), "contexts": [64], "recipes": {"control": "reference", "fp32": FP32, "int8 + e4m3": P_E4M3},
           "output": str(tmp_path / "r")}
    rows = {r["recipe"]: r for r in me.run(exp, quiet=True)}
    assert rows["control"]["kl_mean"] == 0.0
    # float32 against float64 attention: KL ~1e-15 measured; the lab without the cap gives ~6e-9.
    assert rows["model"]["kl_mean"] < 1e-12 and rows["fp32"]["kl_mean"] < 1e-12, (rows["model"]["kl_mean"], rows["fp32"]["kl_mean"])
    assert rows["int8 + e4m3"]["kl_mean"] > 1e-9  # a quantized P is seen
    config = json.loads((tmp_path / "r" / "config.json").read_text())["provenance"]
    assert config["model"].startswith("gemma2 (checkpoint") and len(config["config_sha256"]) == 64
    # The checkpoint saved again (its weights' time moves): a resumed run must not reuse the old units.
    weights = next(ckpt.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000_000))
    with pytest.raises(me.EvalError, match="written from other model files"):
        me.run(exp, quiet=True)
    assert {r["recipe"] for r in me.run(exp, quiet=True, force=True)} == set(rows)
    with pytest.raises(me.EvalError, match=r"\$\.weights: a GGUF file replaces a registry model's weights"):
        me.validate({**exp, "weights": "x.gguf"}, "exp.json")


def _tiny(tmp_path, model_type="llama", extra=None):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "datasets"))
    from tiny_checkpoints import checkpoint, tokenizer_for

    text, _ = me._models.prose_text()
    return checkpoint(model_type, extra or {}, tmp_path / model_type, tokenizer_for(text[:20000]))


def _cuda():
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="the model on the GPU needs a GPU torch sees")
def test_the_model_on_the_gpu(tmp_path):
    """$.device "cuda": the model's own computation on the GPU, the lab's attention on the host. In
    float64 the float64 control is exact there too, the lab's fp32 recipe and the model's own attention
    stay at float32-rounding distance, and a quantized recipe gives the CPU's numbers to its noise."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "datasets"))
    from tiny_checkpoints import checkpoint, tokenizer_for

    # A text of its own (GPU machines lack the Debian file the built-in text comes from).
    words = "the kernel reads keys and values while each query weighs them by the softmax of its scores".split()
    text = " ".join(words[(i * 7) % len(words)] + ("." if i % 11 == 10 else "") for i in range(3000))
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    ckpt = checkpoint("llama", {}, tmp_path / "llama", tokenizer_for(text))
    base = {"name": "gpu", "model": str(ckpt), "text": str(tmp_path / "text.txt"), "contexts": [256], "windows": 2, "precision": "float64",
            "recipes": {"control": "reference", "fp32": FP32, "int8 + e4m3": P_E4M3}}
    gpu = {r["recipe"]: r for r in me.run({**base, "device": "cuda", "output": str(tmp_path / "gpu")}, quiet=True)}
    cpu = {r["recipe"]: r for r in me.run({**base, "output": str(tmp_path / "cpu")}, quiet=True)}
    config = json.loads((tmp_path / "gpu" / "config.json").read_text())
    assert config["provenance"]["model_device"].startswith("cuda (") and "on the GPU" in (tmp_path / "gpu" / "summary.md").read_text()
    assert gpu["control"]["kl_mean"] == 0.0
    # float32 attention against float64 attention: ~1e-15 on the CPU (test_a_checkpoint_directory_with_a_soft_cap).
    assert gpu["fp32"]["kl_mean"] < 1e-12 and gpu["model"]["kl_mean"] < 1e-12, (gpu["fp32"], gpu["model"])
    # The GPU's float64 order moves Q, K and V by ~1e-16, which can flip a float32 rounding and so a
    # quantized code: measured 7e-7 relative on an H100; a wrong computation (a layer left out,
    # another device's logits) moves it by its whole size.
    rel = abs(gpu["int8 + e4m3"]["kl_mean"] / cpu["int8 + e4m3"]["kl_mean"] - 1)
    assert gpu["int8 + e4m3"]["kl_mean"] > 1e-9 and rel < 1e-3, rel


def test_a_recipe_per_layer(tmp_path):
    """A list (one line per layer) and a map (layer index -> line, the rest the float64 reference) give
    the same rows as the recipe on the one layer named by $.layers; another layer gives other rows."""
    ckpt = _tiny(tmp_path)
    base = {"name": "per layer", "model": str(ckpt), "contexts": [64], "model_attention": False}
    rows = {r["recipe"]: r for r in me.run({**base, "output": str(tmp_path / "a"), "recipes": {
        "list": [P_E4M3, "reference"], "map": {"0": P_E4M3}, "other layer": {"1": P_E4M3}}}, quiet=True)}
    one = {r["recipe"]: r for r in me.run({**base, "output": str(tmp_path / "b"), "layers": [0], "recipes": {"e4m3 P": P_E4M3}},
                                          quiet=True)}
    want = one["e4m3 P"]["kl_mean"]
    assert want > 0 and rows["list"]["kl_mean"] == want and rows["map"]["kl_mean"] == want  # the same computation, bit for bit
    assert rows["other layer"]["kl_mean"] not in (0.0, want)
    assert rows["map"]["recipe_global"] == f"per layer: 0: {str(qattn.Recipe(P_E4M3))}; the others: reference"
    summary = (tmp_path / "a" / "summary.md").read_text()
    assert f"- list: per layer: 0: {str(qattn.Recipe(P_E4M3))}; 1: reference" in summary
    with pytest.raises(me.EvalError, match=r'\$\.recipes\["list"\]: 3 recipes; a list gives one per layer and .* has 2'):
        me.validate(me._exp.parse({**base, "output": "x", "recipes": {"list": [FP32] * 3}}), "exp.json")
    with pytest.raises(me.EvalError, match=r'\$\.recipes\["map"\]\.7: .* has layers 0\.\.1'):
        me.validate(me._exp.parse({**base, "output": "x", "recipes": {"map": {"7": FP32}}}), "exp.json")
    with pytest.raises(qattn.model_eval.ExperimentError, match=r"\$\.recipes\[\"map\"\]\.0: recipe string: token 'q=int9'"):
        me._exp.parse({**base, "output": "x", "recipes": {"map": {"0": "q=int9"}}}, "exp.json")


def test_a_model_id_from_the_cache_and_a_gguf_file(tmp_path, monkeypatch, smollm2):
    """$.model as a model id (org/name, read from the Hugging Face cache in offline mode) gives the rows
    of its checkpoint directory; as a .gguf file, the rows of the registry model that carries it."""
    from huggingface_hub import constants

    ckpt = _tiny(tmp_path)  # puts tests/datasets on the path
    from tiny_checkpoints import hub_cache

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache(ckpt, tmp_path / "hub", "lab/tiny", "1" * 40)))
    exp = {"name": "id", "contexts": [64], "recipes": {"e4m3 P": P_E4M3}, "model_attention": False}
    by_id = me.run({**exp, "model": "lab/tiny", "output": str(tmp_path / "id")}, quiet=True)
    by_dir = me.run({**exp, "model": str(ckpt), "output": str(tmp_path / "dir")}, quiet=True)
    assert [r["kl_mean"] for r in by_id] == [r["kl_mean"] for r in by_dir] and by_id[-1]["kl_mean"] > 0
    assert json.loads((tmp_path / "id" / "config.json").read_text())["provenance"]["model"] == "lab/tiny (Hugging Face cache)"
    with pytest.raises(me.EvalError, match=r"\$\.model: --model lab/absent: not in the Hugging Face cache"):
        me.validate(me._exp.parse({**exp, "model": "lab/absent", "output": "x"}), "exp.json")
    gguf = str(me._models.gguf_path("smollm2", me._cache_dir()))
    by_file = me.run({**exp, "model": gguf, "output": str(tmp_path / "gguf")}, quiet=True)
    by_name = me.run({**exp, "model": "smollm2", "output": str(tmp_path / "name")}, quiet=True)
    assert [r["kl_mean"] for r in by_file] == [r["kl_mean"] for r in by_name]
    assert json.loads((tmp_path / "gguf" / "config.json").read_text())["provenance"]["model"].startswith("SmolLM2-135M-Instruct.Q4_1 (GGUF ")


def test_noise_floor_and_float64_precision(tmp_path):
    """$.noise_floor repeats each recipe's pass with Q, K, V moved by about a float32 ulp and reports the
    distance as the recipe's noise; $.precision float64 runs the model's own computation in float64."""
    ckpt = _tiny(tmp_path)
    exp = {"name": "noise", "model": str(ckpt), "contexts": [64], "noise_floor": True,
           "recipes": {"control": "reference", "int8 QK": "q=int8/token k=int8/token acc.qk=exact", "fp32": FP32}}
    rows = {r["recipe"]: r for r in me.run({**exp, "output": str(tmp_path / "f32")}, quiet=True)}
    assert set(rows) == {"float64", "model", "control", "int8 QK", "fp32"}  # the perturbed passes are folded into their recipes
    assert rows["float64"]["noise_kl_mean"] is None and rows["model"]["noise_kl_mean"] is None
    for name in ("control", "int8 QK", "fp32"):
        assert rows[name]["noise_dppl_pct"] >= 0 and rows[name]["noise_kl_mean"] >= 0
    # An ulp moves float64 attention's output by ~1e-7 relative: KL ~1e-14; 1e-10 fails on a perturbation
    # 100 times larger, or one applied to the unperturbed pass.
    assert 0 < rows["control"]["noise_kl_mean"] < 1e-10
    summary = (tmp_path / "f32" / "summary.md").read_text()
    assert "noise: % / KL |" in summary and "Noise floor: each recipe's pass repeated" in summary
    assert "noise_dppl_pct,noise_kl_mean" in (tmp_path / "f32" / "results.csv").read_text().splitlines()[0]
    rows64 = {r["recipe"]: r for r in me.run({**exp, "precision": "float64", "output": str(tmp_path / "f64")}, quiet=True)}
    assert rows64["control"]["kl_mean"] == 0.0
    # The model's own attention in float64 against the lab's float64 reference on float32-rounded Q, K,
    # V: only that rounding stays (measured 7e-17 here, 5.7e-16 with the model in float32; SmolLM2 at
    # 128 tokens 2.9e-13 against 1.0e-11): smaller than float32's whole computation.
    assert rows64["model"]["kl_mean"] < rows["model"]["kl_mean"] / 4, (rows64["model"]["kl_mean"], rows["model"]["kl_mean"])
    with pytest.raises(qattn.model_eval.ExperimentError, match=r"\$\.precision: \"float16\"; expected 'float32' or 'float64'"):
        me._exp.parse({**exp, "precision": "float16", "output": "x"}, "exp.json")
    with pytest.raises(qattn.model_eval.ExperimentError, match=r"must be non-empty.* not end with ' ~perturbed'"):
        me._exp.parse({**exp, "recipes": {"a ~perturbed": FP32}, "output": "x"}, "exp.json")



@pytest.mark.skipif(not qattn.gpu_available(), reason="backend gpu needs a build with GPU kernels")
@pytest.mark.parametrize("model_type, named", [("bloom", "ALiBi"), ("gpt_oss", "sink")])
def test_gpu_backend_refuses_an_uncovered_variant_before_any_work(tmp_path, model_type, named):
    """backend "gpu" on a model whose attention variant no GPU family runs (BLOOM's ALiBi slopes,
    gpt-oss's sinks): validation's coverage question carries the variant, so the refusal names it
    before a layer runs, not at the first layer."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "datasets"))
    from tiny_checkpoints import checkpoint, tokenizer_for

    # A text of its own (GPU machines lack the Debian file the built-in text comes from).
    words = "the kernel reads keys and values while each query weighs them by the softmax of its scores".split()
    text = " ".join(words[(i * 7) % len(words)] for i in range(2000))
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    ckpt = checkpoint(model_type, {}, tmp_path / model_type, tokenizer_for(text))
    exp = {"name": "v", "model": str(ckpt), "text": str(tmp_path / "text.txt"), "contexts": [64], "backend": "gpu", "recipes": {"fp32": FP32},
           "output": str(tmp_path / "r")}
    with pytest.raises(me.EvalError, match=rf"no GPU kernel runs .*: .*{named}"):
        me.validate(exp, "exp.json")
    assert not (tmp_path / "r").exists()
