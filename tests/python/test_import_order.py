"""The package works whichever extension module the interpreter loaded first.

On the H200 machine's Python (3.12, NumPy 2.5 wheel) `str(Recipe)` once crashed when NumPy had been
imported before qattn, and not the other way round; each order runs in its own interpreter here.
"""
import os
import subprocess
import sys

import pytest

SCRIPT = """
import qattn
for preset in qattn.presets():
    r = qattn.Recipe("preset=" + preset["name"])
    assert qattn.Recipe(str(r)) == r, preset["name"]
    assert qattn.Recipe.from_json(r.to_json()) == r, preset["name"]
print(len(qattn.presets()))
"""


@pytest.mark.parametrize("first", ["numpy", "ml_dtypes", "matplotlib.pyplot"])
def test_every_preset_round_trips_after_another_extension_loaded_first(first):
    code = f"import {first}\n" + SCRIPT
    p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True,
                       env=os.environ.copy(), timeout=120)
    assert p.returncode == 0, f"import {first} first: exit {p.returncode}\n{p.stderr[-3000:]}"
    assert int(p.stdout.split()[-1]) >= 10
