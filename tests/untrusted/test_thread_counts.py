"""Thread counts are bounded with a clear error: a count in the thousands used to crash inside the
OpenMP runtime (threads=1000000, OMP_NUM_THREADS=100000) or end the interpreter (2^31 - 1)."""
import os
import subprocess

import numpy as np
import pytest

import qattn
from qattn import _model_experiment


def small():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((2, 32, 16)).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("threads", [1_000_000, 2**31 - 1, -1])
def test_emulate_threads_bounded(threads):
    q, k, v = small()
    with pytest.raises(ValueError, match=rf"^threads = {threads}; expected .*at most {qattn.max_threads()} \(4 per processor"):
        qattn.emulate(q, k, v, "q=int8/token k=int8/token", threads=threads)


def test_emulate_threads_at_the_bound_runs():
    q, k, v = small()
    a = qattn.emulate(q, k, v, "q=int8/token k=int8/token", threads=qattn.max_threads())["out"]
    b = qattn.emulate(q, k, v, "q=int8/token k=int8/token", threads=1)["out"]
    assert np.array_equal(a, b)  # threads never change a bit


def test_omp_num_threads_bounded(dump, qattn_exe):
    env = dict(os.environ, OMP_NUM_THREADS="100000")
    r = subprocess.run([qattn_exe, "eval", "--data", dump, "--layer", "0", "--tokens", "128", "--rows", "sample:16:1",
                        "--recipe", "q=int8/token k=int8/token"], capture_output=True, text=True, env=env)
    assert r.returncode == 1, (r.returncode, r.stderr)  # an error, not a signal
    assert "OMP_NUM_THREADS=100000 asks for 100000 threads; expected at most" in r.stderr, r.stderr


def test_model_experiment_threads_bounded():
    doc = {"name": "t", "model": "smollm2-135m", "contexts": [64], "recipes": {"a": "q=int8/token"}, "output": "out",
           "threads": 1_000_000}
    with pytest.raises(ValueError, match=r"\$\.threads: 1000000; expected at most"):
        _model_experiment.parse(doc, "exp.json")
