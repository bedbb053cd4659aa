"""What a new user mistypes gets the word they meant: a JSON key, a recipe key, a granularity or
modifier; a relative path that does not exist says where it was looked for."""
import json
import os
import subprocess

import pytest

import qattn


def test_experiment_key_typo_names_the_key_meant(dump, qattn_exe, tmp_path):
    exp = {"name": "typo", "dataset": dump, "recipe": {"int8": "q=int8/token k=int8/token"}, "output": str(tmp_path / "r")}
    (tmp_path / "exp.json").write_text(json.dumps(exp))
    p = subprocess.run([qattn_exe, "run", str(tmp_path / "exp.json")], capture_output=True, text=True)
    assert p.returncode == 1 and "exp.json: recipe: unknown key; did you mean 'recipes'?; expected one of:" in p.stderr, p.stderr


@pytest.mark.parametrize("line, message", [
    ("q=int8/token k=int8/token p=e4m3/statc:448", "unknown granularity or modifier 'statc'; did you mean 'static'?; expected one of: tensor, head"),
    ("q=int8/tokn k=int8/token", "unknown granularity or modifier 'tokn'; did you mean 'token'?"),
    ("q=int8/token k=int8/token sofmax=qflash", "unknown key 'sofmax'; did you mean 'softmax'?; expected one of:"),
])
def test_recipe_typo_names_the_word_meant(line, message):
    with pytest.raises(ValueError, match=message.replace("?", r"\?")):
        qattn.Recipe(line)


def test_a_missing_relative_path_says_it_is_relative(qattn_exe, tmp_path):
    p = subprocess.run([qattn_exe, "inspect", "nosuch.h5"], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 1 and f"nosuch.h5: no such file (a relative path, read from the current folder {tmp_path})" in p.stderr, p.stderr


def test_bench_emulate_names_each_stage_as_it_starts(qattn_exe):
    p = subprocess.run([qattn_exe, "bench", "emulate", "--tokens", "64", "--head-dims", "16", "--reps", "1"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    stages = [l for l in p.stderr.splitlines() if l.startswith("bench:   timing")]
    assert stages[:2] == ["bench:   timing the float64 reference", "bench:   timing the emulator"], p.stderr
    assert len(stages) == 5  # and the three PV accumulator modes


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TORCH_PYTHON = os.path.join(ROOT, ".venv-dump", "bin", "python")  # scripts/install-dumper.sh (the README's test command runs it)


@pytest.mark.parametrize("args, message", [
    (["--tokens", "abc", "--dry-run"], "argument --tokens: 'abc' is not an integer"),
    (["--tokens", "-5", "--dry-run"], "argument --tokens: -5; expected an integer >= 1"),
    (["--head-dims", ",", "--dry-run"], "argument --head-dims: ',': expected one or more integers >= 1"),
    (["--heads", "0", "--dry-run"], "argument --heads: 0; expected an integer >= 1"),
])
def test_bench_sdpa_arguments_are_typed(args, message):
    assert os.path.exists(TORCH_PYTHON), f"{TORCH_PYTHON}: run scripts/install-dumper.sh"
    p = subprocess.run([TORCH_PYTHON, os.path.join(ROOT, "scripts", "bench_sdpa.py"), *args], capture_output=True, text=True)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_score_peers_without_a_dump_or_outputs_fails(qattn_exe, dump, tmp_path):
    script = os.path.join(ROOT, "scripts", "peers", "score-peers.sh")
    env = dict(os.environ, QATTN=qattn_exe)
    p = subprocess.run(["bash", script, str(tmp_path)], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "usage: score-peers.sh OUT_DIR DUMP" in p.stderr, p.stderr
    p = subprocess.run(["bash", script, str(tmp_path), str(tmp_path / "nosuch.h5")], capture_output=True, text=True, env=env)
    assert p.returncode == 1 and "nosuch.h5: no such file" in p.stderr, p.stderr
    p = subprocess.run(["bash", script, str(tmp_path), dump], capture_output=True, text=True, env=env)
    assert p.returncode == 1 and "no outputs of a preset's kernel" in p.stderr and p.stdout == "", p.stderr
