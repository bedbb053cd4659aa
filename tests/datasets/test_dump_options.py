"""The dumper's ways in, as a user runs them (pytest, in the dumper's environment .venv-dump): a model id
from the Hugging Face cache in offline mode, a configuration alone with random weights in bfloat16,
text from a JSON Lines or Parquet column, `python -m qattn.dump` as the same program, and the
refusals (an id not in the cache, weights larger than the free memory, a missing column, a failed
check) each naming what was wrong and leaving no file behind."""
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_checkpoints import TINY, checkpoint, hub_cache, tokenizer_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DUMPER = [sys.executable, str(ROOT / "datasets" / "dump" / "dump_qkv.py")]
WORDS = ("the model reads a long text and each head attends to the keys it can see while the softmax "
         "weighs them so that the output mixes values in proportion ").split()


def text(n_words=400):
    return " ".join(WORDS[i % len(WORDS)] + ("." if i % 13 == 12 else "") for i in range(n_words))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    where = tmp_path_factory.mktemp("ckpt")
    (where / "text.txt").write_text(text(), encoding="utf-8")
    return checkpoint("llama", {}, where / "llama", tokenizer_for(text())), where / "text.txt"


def dump(*args, env=None):
    return subprocess.run([*DUMPER, *map(str, args)], capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_model_id_from_the_offline_cache(tiny, tmp_path):
    ckpt, txt = tiny
    rev = "0" * 40
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache(ckpt, tmp_path / "hub", "lab/tiny", rev))}
    r = dump("--model", "lab/tiny", "--text", txt, "--tokens", 64, "--out", tmp_path / "id.h5", env=env)
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "id.h5") as f:
        assert f.attrs["model"] == "lab/tiny (llama)"
        assert f.attrs["weights"].startswith(f"Hugging Face model lab/tiny (snapshot {rev})")
        ids_by_id = f["layers/1/k"][()]
    # The same checkpoint by its directory: the same tensors.
    assert dump("--model", ckpt, "--text", txt, "--tokens", 64, "--out", tmp_path / "dir.h5").returncode == 0
    with h5py.File(tmp_path / "dir.h5") as f:
        assert np.array_equal(f["layers/1/k"][()], ids_by_id)
    r = dump("--model", "lab/absent", "--text", txt, "--tokens", 64, "--out", tmp_path / "no.h5", env=env)
    assert r.returncode == 1 and "--model lab/absent: not in the Hugging Face cache" in r.stderr and "HF_HUB_OFFLINE" in r.stderr
    assert not (tmp_path / "no.h5").exists()


def test_random_weights_from_a_configuration_in_bf16(tmp_path):
    # A configuration and tokenizer without weights, as shaped_checkpoint.py writes them for scale runs.
    from transformers import AutoConfig

    where = tmp_path / "shape"
    AutoConfig.for_model("qwen2", **TINY).save_pretrained(where)
    tokenizer_for(text()).save_pretrained(where)
    (tmp_path / "text.txt").write_text(text(), encoding="utf-8")
    r = dump("--model", where, "--text", tmp_path / "text.txt", "--tokens", 64, "--out", tmp_path / "none.h5")
    assert r.returncode == 1 and "the weights cannot be loaded" in r.stderr
    outs = []
    for k in range(2):
        out = tmp_path / f"r{k}.h5"
        r = dump("--model", where, "--random-weights", 3, "--compute", "bf16", "--text", tmp_path / "text.txt", "--tokens", 64, "--out", out)
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("  ok") == TINY["num_hidden_layers"]
        with h5py.File(out) as f:
            assert "random (seed 3) from config.json in bf16" in f.attrs["weights"]
            assert f.attrs["compute"] == "bf16 on cpu"
            outs.append(f["layers/0/q"][()])
    assert np.array_equal(*outs)  # the seed fixes the weights: a rerun gives the same tensors


def test_text_from_a_jsonl_or_parquet_column(tiny, tmp_path):
    ckpt, _ = tiny
    rows = [text(60 + 10 * i) for i in range(5)]
    jl = tmp_path / "t.jsonl"
    jl.write_text("".join(json.dumps({"id": i, "body": r}) + "\n" for i, r in enumerate(rows)), encoding="utf-8")
    r = dump("--model", ckpt, "--text", jl, "--text-column", "body", "--tokens", 64, "--out", tmp_path / "j.h5")
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "j.h5") as f:
        assert "column 'body' (5 rows joined by blank lines" in f.attrs["text_source"]
    jl.write_text(json.dumps({"body": "a"}) + "\n" + json.dumps({"text": "b"}) + "\n", encoding="utf-8")
    r = dump("--model", ckpt, "--text", jl, "--text-column", "body", "--tokens", 64, "--out", tmp_path / "bad.h5")
    assert r.returncode == 1 and f"{jl}: line 2: no key 'body'" in r.stderr
    r = dump("--model", ckpt, "--text", jl, "--tokens", 64, "--out", tmp_path / "bad.h5")
    assert r.returncode == 1 and "needs --text-column" in r.stderr
    import pyarrow as pa
    import pyarrow.parquet as pq

    pqf = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(5)), "body": rows}), pqf)
    r = dump("--model", ckpt, "--text", pqf, "--text-column", "body", "--tokens", 64, "--out", tmp_path / "p.h5")
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "p.h5") as f, h5py.File(tmp_path / "j.h5") as g:
        assert np.array_equal(f["tokens"][()], g["tokens"][()])  # the same rows, the same tokens
    r = dump("--model", ckpt, "--text", pqf, "--text-column", "text", "--tokens", 64, "--out", tmp_path / "bad.h5")
    assert r.returncode == 1 and "no column 'text'; its columns: id, body" in r.stderr
    assert not (tmp_path / "bad.h5").exists()


def test_weights_larger_than_free_memory_are_refused_before_loading(tmp_path):
    from transformers import AutoConfig

    where = tmp_path / "huge"
    # ~2.7e13 parameters (100 TB in fp32): more than any machine's free memory.
    AutoConfig.for_model("llama", **{**TINY, "hidden_size": 65536, "intermediate_size": 262144, "num_hidden_layers": 400,
                                     "num_attention_heads": 512, "num_key_value_heads": 512}).save_pretrained(where)
    tokenizer_for(text()).save_pretrained(where)
    (tmp_path / "text.txt").write_text(text(), encoding="utf-8")
    r = dump("--model", where, "--random-weights", 0, "--text", tmp_path / "text.txt", "--tokens", 64, "--out", tmp_path / "h.h5")
    assert r.returncode == 1 and f"{where / 'config.json'}: the weights take" in r.stderr and "GiB free on cpu" in r.stderr
    assert not (tmp_path / "h.h5").exists()


def test_chosen_query_heads_with_their_kv_heads(tiny, tmp_path):
    """--heads stores whole GQA groups: the tiny Llama's query heads 2 and 3 with their KV head 1, the
    very tensors of a full dump; part of a group is refused by name, nothing written."""
    ckpt, txt = tiny
    assert dump("--model", ckpt, "--text", txt, "--tokens", 64, "--out", tmp_path / "all.h5").returncode == 0
    r = dump("--model", ckpt, "--text", txt, "--tokens", 64, "--heads", "3,2", "--out", tmp_path / "some.h5")
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "all.h5") as a, h5py.File(tmp_path / "some.h5") as b:
        assert b.attrs["query_heads"] == "2,3"
        for layer in ("0", "1"):
            assert np.array_equal(b[f"layers/{layer}/q"][()], a[f"layers/{layer}/q"][2:4])
            assert np.array_equal(b[f"layers/{layer}/k"][()], a[f"layers/{layer}/k"][1:2])
            assert np.array_equal(b[f"layers/{layer}/v"][()], a[f"layers/{layer}/v"][1:2])
    for heads, message in (("1", "query heads 0..1 share KV head 0 (4 query heads over 2 KV heads); expected whole groups, e.g. 0,1"),
                           ("0,1,7", "query head 7 is outside 0..3"), ("x", "--heads 'x': expected comma-separated")):
        r = dump("--model", ckpt, "--text", txt, "--tokens", 64, "--heads", heads, "--out", tmp_path / "bad.h5")
        assert r.returncode != 0 and message in r.stderr, (heads, r.stderr)
        assert not (tmp_path / "bad.h5").exists()


def test_a_failed_check_leaves_nothing(tiny, tmp_path):
    # Layers are written as they are captured; a later layer's failure must still leave no file.
    ckpt, txt = tiny
    r = dump("--model", ckpt, "--text", txt, "--tokens", 64, "--stored-tolerance", 1e-12, "--out", tmp_path / "f.h5")
    assert r.returncode == 1 and "the float64 check failed for layer 0" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_python_dash_m_qattn_dump_is_the_same_program(tiny, tmp_path):
    ckpt, txt = tiny
    build_python = os.environ.get("QATTN_BUILD_PYTHON")
    if not build_python:
        pytest.skip("QATTN_BUILD_PYTHON (the built package's folder) not set")
    env = {**os.environ, "PYTHONPATH": build_python}
    r = subprocess.run([sys.executable, "-m", "qattn.dump", "--model", str(ckpt), "--text", str(txt), "--tokens", "64", "--out",
                        str(tmp_path / "m.h5")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert dump("--model", ckpt, "--text", txt, "--tokens", 64, "--out", tmp_path / "s.h5").returncode == 0
    with h5py.File(tmp_path / "m.h5") as f, h5py.File(tmp_path / "s.h5") as g:
        for t in ("q", "k", "v"):
            assert np.array_equal(f[f"layers/1/{t}"][()], g[f"layers/1/{t}"][()])
