"""A small file that declares a huge layer is refused before anything of its size is built: the
check covers Q, K and V together and the head lists, and the error names the file, under a
memory limit too."""
import os
import resource
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
H5PY = os.path.join(ROOT, ".venv-dump", "bin", "python")  # scripts/install-dumper.sh (the README's test command runs it)

MAKE = textwrap.dedent("""
    import sys, h5py, numpy as np
    path, heads, tokens, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with h5py.File(path, "w") as f:
        for k, v in dict(schema="qattn-dump/1", model="m", weights="w", text_source="t", created_by="c", created_at="now").items():
            f.attrs[k] = v
        f.attrs["n_tokens"] = np.int64(tokens)
        g = f.create_group("layers/0")
        g.attrs.update(causal=np.int64(1), sliding_window=np.int64(0), softmax_scale=np.float64(0.125), rope="applied")
        # Chunked and never written: the file holds a few KiB, whatever shape it declares.
        g.create_dataset("q", shape=(heads, tokens, dim), dtype="f2", chunks=(1, 1, min(dim, 4096)), fillvalue=1)
        for name in ("k", "v"):
            g.create_dataset(name, shape=(1, tokens, dim), dtype="f2", chunks=(1, 1, min(dim, 4096)), fillvalue=1)
""")


def declared_dump(tmp_path, heads, tokens, dim):
    if not os.path.exists(H5PY):
        pytest.fail(f"{H5PY} not found: run scripts/install-dumper.sh (the README's test command installs it)")
    path = str(tmp_path / "declared.h5")
    subprocess.run([H5PY, "-c", MAKE, path, str(heads), str(tokens), str(dim)], check=True)
    assert os.path.getsize(path) < 64 * 1024
    return path


def limited(gib):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))
    return apply


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""), reason="AddressSanitizer's shadow memory needs an unlimited address space")
def test_inspect_refuses_2_to_the_30_heads_naming_the_file(qattn_exe, tmp_path):
    path = declared_dump(tmp_path, 2**30, 4, 8)
    # 1 GiB of address space: the old head list alone (4 GiB) ran out of it and named no file.
    # 136 GiB: 128 of float32 Q and 8 of head lists.
    p = subprocess.run([qattn_exe, "inspect", path], capture_output=True, text=True, preexec_fn=limited(1), timeout=60)
    assert p.returncode != 0
    assert f"{path}: /layers/0 (q, k and v: 1073741824 + 2 x 1 heads of 4 x 8) as float32: needs 136.0 GiB of memory" in p.stderr, p.stderr


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""), reason="AddressSanitizer's shadow memory needs an unlimited address space")
def test_one_check_for_q_k_and_v_together(qattn_exe, tmp_path):
    # Q, K and V each of 2^30 elements' 4 GiB as float32 would pass one at a time on a large
    # machine; their sum with a head dim of 2^28 is refused at once, before Q is read.
    path = declared_dump(tmp_path, 1, 4, 2**28)
    p = subprocess.run([qattn_exe, "inspect", path], capture_output=True, text=True, preexec_fn=limited(2), timeout=60)
    assert p.returncode != 0
    assert f"{path}: /layers/0 (q, k and v: 1 + 2 x 1 heads of 4 x 268435456) as float32: needs 12.0 GiB of memory" in p.stderr, p.stderr


WRITE = textwrap.dedent("""
    import numpy as np, qattn
    big = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(8, 1 << 20, 4), strides=(0, 0, 0))  # 128 MiB as float32
    for call in (lambda: qattn.write_outputs("o.h5", "k", [{"layer": "0", "o": big}]),
                 lambda: qattn.write_dump("d.h5", [{"name": "0", "q": big, "k": big[:1], "v": big[:1]}],
                                          {"schema": "qattn-dump/1", "model": "m", "weights": "w", "text_source": "t", "n_tokens": 1 << 20,
                                           "created_by": "c", "created_at": "now"}, dtype="fp32")):
        try:
            call()
            print("written")
        except ValueError as e:
            print(e)
""")


def test_a_write_past_the_file_size_limit_is_refused_before_it_starts(tmp_path):
    # 64 MiB of file (ulimit -f): a write that failed half way left libhdf5 a file it could not
    # close, and the interpreter died at exit (SIGSEGV in H5F__close_cb).
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
    p = subprocess.run([sys.executable, "-c", WRITE], capture_output=True, text=True, cwd=tmp_path, preexec_fn=limit, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 2 and all("needs a file of" in l and "(ulimit -f)" in l for l in lines), p.stdout
    assert lines[0].startswith("not written: o.h5: ") and lines[1].startswith("not written: d.h5: "), p.stdout
    assert os.listdir(tmp_path) == []  # no temporary file left
