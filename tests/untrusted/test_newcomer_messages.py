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
