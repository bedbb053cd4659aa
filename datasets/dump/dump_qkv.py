#!/usr/bin/env python3
"""The dumper's command line (python/qattn/dump.py, loaded by its path: it runs in the dumper's
environment without a built qattn; `python -m qattn.dump` is the same program where the package is
installed). Run through scripts/make-dumps.sh or .venv-dump/bin/python."""
import importlib.util
import sys
from pathlib import Path

_path = Path(__file__).resolve().parents[2] / "python" / "qattn" / "dump.py"
_spec = importlib.util.spec_from_file_location("qattn_dump", _path)
_dump = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_dump)

if __name__ == "__main__":
    sys.exit(_dump.main())
