"""Shared fixtures: the shipped dump and the qattn executable (ctest passes their paths)."""
import os

import pytest

ROOT = os.environ.get("QATTN_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


@pytest.fixture(scope="session")
def dump():
    return os.path.join(ROOT, "datasets", "smollm2-135m-2k.h5")


@pytest.fixture(scope="session")
def qattn_exe():
    exe = os.environ.get("QATTN_EXE", os.path.join(ROOT, "build", "harness", "qattn"))
    if not os.path.exists(exe):
        pytest.fail(f"qattn executable not found at {exe}; set QATTN_EXE")
    return exe
