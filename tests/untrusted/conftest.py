"""The fixtures of tests/python (the shipped dump and the qattn executable), shared, not copied."""
import importlib.util
import os

_spec = importlib.util.spec_from_file_location("qattn_python_test_fixtures", os.path.join(os.path.dirname(__file__), "..", "python", "conftest.py"))
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

dump = _fixtures.dump
qattn_exe = _fixtures.qattn_exe
