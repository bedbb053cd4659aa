"""Exit 0 when every NAME==VERSION argument is installed at exactly that version, else 1."""
import sys
from importlib.metadata import PackageNotFoundError, version

for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
