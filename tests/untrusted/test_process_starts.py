"""Names the lab did not choose reach no shell: an experiment's name, a report path given to
`qattn score -o`, `qattn plot` or `qattn.score(output=...)`, with quotes, `;`, `$(...)` and
backquotes in it, is a folder name and nothing else. And a report whose figures were not drawn
is a failed command, not a success."""
import json
import os
import subprocess

import numpy as np

import qattn

# Every way a string can leave a quoted shell word: ' closes the quoting the old code used, $( )
# and backquotes substitute inside double quotes, ; and newline end a command.
HOSTILE = ["x';touch PWNED_A;'", 'x";touch PWNED_B;"', "x$(touch PWNED_C)", "x`touch PWNED_D`", "x\ntouch PWNED_E"]


def no_marker(folder):
    found = [f for f in os.listdir(folder) if f.startswith("PWNED")]
    assert not found, f"a shell ran a command from a name: {found}"


def experiment(dump, name, out_root):
    return {"name": name, "dataset": dump, "selection": {"layers": [0], "heads": [0], "contexts": [128], "rows": 16},
            "recipes": {"int8": "q=int8/token k=int8/token"}, "output": os.path.join(out_root, name)}


def test_run_and_plot_with_hostile_names(dump, qattn_exe, tmp_path):
    for i, name in enumerate(HOSTILE):
        exp = experiment(dump, name, str(tmp_path))
        path = tmp_path / f"exp{i}.json"
        path.write_text(json.dumps(exp))
        r = subprocess.run([qattn_exe, "run", str(path), "--quiet"], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        no_marker(tmp_path)
        # The figures were drawn into the folder of that exact name.
        assert os.path.exists(os.path.join(exp["output"], "figures", "p_mass_per_decade.png")), os.listdir(os.path.join(exp["output"], "figures"))
        r = subprocess.run([qattn_exe, "plot", exp["output"]], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        no_marker(tmp_path)


def test_score_with_hostile_output(dump, qattn_exe, tmp_path):
    q = np.zeros((9, 64, 64), np.float32)
    d = qattn.load_layer(dump, "0", tokens=64)
    ref = qattn.reference(d["q"], d["k"], d["v"], causal=True)["out"].astype(np.float32)
    outputs = str(tmp_path / "k.h5")
    qattn.write_outputs(outputs, "float32-reference", [{"layer": "0", "o": ref}])
    del q
    for name in HOSTILE:
        out = str(tmp_path / ("cli-" + name))
        r = subprocess.run([qattn_exe, "score", dump, outputs, "-o", out, "--quiet"], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert os.path.exists(os.path.join(out, "figures", "score_per_head.csv"))
        no_marker(tmp_path)
        r = subprocess.run([qattn_exe, "plot", out], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        no_marker(tmp_path)

    cwd = os.getcwd()
    os.chdir(tmp_path)  # a command the old code ran would have written its marker here
    try:
        for name in HOSTILE:
            rows = qattn.score(lambda q, k, v, **kw: qattn.reference(q, k, v, causal=kw["causal"], window=kw["window"],
                                                                      softmax_scale=kw["softmax_scale"])["out"],
                               dump, layers=[0], contexts=[64], output=str(tmp_path / ("py-" + name)))
            assert len(rows) == 9
            no_marker(tmp_path)
    finally:
        os.chdir(cwd)


def test_figures_not_drawn_is_a_failure(dump, qattn_exe, tmp_path):
    exp = experiment(dump, "figures-fail", str(tmp_path))
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(exp))
    r = subprocess.run([qattn_exe, "run", str(path), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # A folder where a figure must go: matplotlib cannot save it, as on a full disk.
    png = os.path.join(exp["output"], "figures", "p_mass_per_decade.png")
    os.remove(png)
    os.mkdir(png)
    r = subprocess.run([qattn_exe, "run", str(path), "--resume", "--quiet"], capture_output=True, text=True)
    assert r.returncode != 0, "figures not drawn, yet run exited 0"
    assert "figures were not drawn" in r.stderr and "qattn plot" in r.stderr, r.stderr
    r = subprocess.run([qattn_exe, "plot", exp["output"]], capture_output=True, text=True)
    assert r.returncode != 0 and "figures not rendered" in r.stderr, r.stderr
