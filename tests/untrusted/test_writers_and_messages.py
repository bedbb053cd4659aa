"""Writers refuse what readers would refuse (the written file is read back by its schema's reader
before it replaces anything), and a wrong argument is one message naming it and what was
expected, never a C++ type name or nanobind's generic TypeError."""
import json
import os
import subprocess

import numpy as np
import pytest

import qattn

ATTRS = {"schema": "qattn-dump/1", "model": "test", "weights": "random", "text_source": "none", "n_tokens": 16,
         "created_by": "pytest", "created_at": "now"}


def layer(**extra):
    rng = np.random.default_rng(3)
    d = {"name": "0", "q": rng.standard_normal((2, 16, 8)).astype(np.float32), "k": rng.standard_normal((1, 16, 8)).astype(np.float32),
         "v": rng.standard_normal((1, 16, 8)).astype(np.float32), "causal": True}
    d.update(extra)
    return d


@pytest.mark.parametrize("change, attrs, message", [
    ({"sliding_window": -3}, {}, r"layers\[0\]\.sliding_window: -3; expected 0 \(none\) or a positive token count"),
    ({"softmax_scale": float("nan")}, {}, r"not written: .*/layers/0.*softmax_scale"),
    ({"softmax_scale": -1.0}, {}, r"not written: .*/layers/0.*softmax_scale"),
    ({}, {"n_tokens": 99}, r"not written: .*n_tokens"),
    ({}, {"schema": "nope"}, r"not written: .*schema"),
    ({"name": "/abs"}, {}, r"/layers//abs: name \"/abs\"; expected a non-empty UTF-8 name without '/'"),
    ({"name": "a\x00b"}, {}, r"/layers/a\\x00b: name \"a\\x00b\"; expected a non-empty UTF-8 name without '/' or NUL"),
    ({"causal": "yes"}, {}, r"layers\[0\]\.causal: 'yes'; expected True or False"),
    ({}, {"model": "a\x00b"}, r"attribute 'model' = .*; expected UTF-8 text without NUL bytes"),
])
def test_write_dump_refuses_what_open_dump_refuses(tmp_path, change, attrs, message):
    path = str(tmp_path / "d.h5")
    with pytest.raises(ValueError, match=message):
        qattn.write_dump(path, [layer(**change)], dict(ATTRS, **attrs), dtype="fp32")
    assert os.listdir(tmp_path) == []  # nothing left behind, not even the temporary file
    qattn.write_dump(path, [layer()], ATTRS, dtype="fp32")  # and the unchanged call writes a file the reader takes
    assert qattn.open_dump(path)["n_tokens"] == 16


@pytest.mark.parametrize("entry, kernel, message", [
    ({"rows": [3, 1, 2]}, "k", r"not written: .*/layers/0/rows\[1\]\] = 1 after 3; expected strictly increasing rows|not written: .*rows"),
    ({"context": -4}, "k", r"layers\[0\]\.context: -4; expected a positive token count"),
    ({}, "a\x00b", r"attribute 'kernel' = .*; expected UTF-8 text without NUL bytes"),
])
def test_write_outputs_refuses_what_read_outputs_refuses(tmp_path, entry, kernel, message):
    o = np.zeros((2, 3, 8), np.float32)
    with pytest.raises(ValueError, match=message):
        qattn.write_outputs(str(tmp_path / "o.h5"), kernel, [dict({"layer": "0", "o": o, "context": 16}, **entry)])
    assert os.listdir(tmp_path) == []


def test_argument_messages(dump, qattn_exe, tmp_path):
    q = np.zeros((2, 16, 8), np.float32)
    with pytest.raises(ValueError, match=r"^rows\[0\]: 1\.5; expected a row index >= 0"):
        qattn.reference(q, q[:1], q[:1], rows=(1.5, 3))
    with pytest.raises(ValueError, match=r"^q: dtype complex64; expected float16, bfloat16, float32 or float64"):
        qattn.reference(q.astype(np.complex64), q[:1], q[:1])
    with pytest.raises(ValueError, match=r"^q: dtype bool; expected float16"):
        qattn.reference(q.astype(bool), q[:1], q[:1])
    for bad, shown in [(np.array(["a", "b"]).reshape(1, 2, 1), "dtype <U1;"), (np.zeros((1, 2, 1), ">f4"), "dtype >f4 \\(big-endian\\);"),
                       (np.zeros((1, 2, 1), object), "dtype object;"), ("abc", "a str; expected an array")]:
        with pytest.raises(ValueError, match=rf"^q: .*{shown}"):
            qattn.reference(bad, q[:1], q[:1])
    with pytest.raises(ValueError, match=r"^contexts: empty; expected at least one token count"):
        qattn.score(lambda *a, **k: None, dump, contexts=[], output=str(tmp_path / "x"))
    with pytest.raises(ValueError, match=r"^layers: empty; expected at least one of 0, 7, 15, 22, 29"):
        qattn.score(lambda *a, **k: None, dump, layers=[], output=str(tmp_path / "x"))
    assert not os.path.exists(tmp_path / "x")
    assert qattn.load_layer(dump, 15, tokens=8)["q"].shape == qattn.load_layer(dump, "15", tokens=8)["q"].shape
    # A recipe token of 120 KB is shown by its start and its length, not echoed whole (twice).
    with pytest.raises(ValueError) as e:
        qattn.Recipe("q=int8/" + "x" * 120_000)
    assert len(str(e.value)) < 1000 and "characters)" in str(e.value), str(e.value)[:300]


def test_non_utf8_paths_are_named_before_any_folder_is_made(dump, qattn_exe, tmp_path):
    d = qattn.load_layer(dump, "0", tokens=64)
    ref = qattn.reference(d["q"], d["k"], d["v"], causal=True)["out"].astype(np.float32)
    outputs = str(tmp_path / "k.h5")
    qattn.write_outputs(outputs, "k", [{"layer": "0", "o": ref}])
    bad = os.path.join(os.fsencode(tmp_path), b"rep\xff")
    r = subprocess.run([os.fsencode(qattn_exe), b"score", os.fsencode(dump), os.fsencode(outputs), b"-o", bad], capture_output=True)
    assert r.returncode == 1 and b'is not UTF-8; expected a UTF-8 path' in r.stderr and b"rep\\xff" in r.stderr, r.stderr
    assert not os.path.exists(bad)
    exp = os.path.join(os.fsencode(tmp_path), b"e\xff.json")
    with open(exp, "w") as f:
        json.dump({"name": "x", "dataset": dump, "selection": {"layers": [0], "heads": [0], "contexts": [64], "rows": 8},
                   "recipes": {"a": "q=int8/token k=int8/token"}, "output": str(tmp_path / "out")}, f)
    r = subprocess.run([os.fsencode(qattn_exe), b"run", exp], capture_output=True)
    assert r.returncode == 1 and b"the experiment file: path" in r.stderr and b"is not UTF-8" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "out")


def test_end_to_end_experiment_files_are_named(tmp_path):
    """The end-to-end evaluation's experiment reader (no torch needed): a file nested 100,000 levels
    deep, one that is not UTF-8 and a FIFO are each one error naming the file."""
    from qattn import _model_experiment as exp

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=rf"^{deep}: JSON nested too deeply"):
        exp.load(str(deep))
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(ValueError, match=rf"^{latin}: byte 13 is not UTF-8"):
        exp.load(str(latin))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=rf"^{fifo}: not a regular file"):
        exp.load(str(fifo))
