"""The `qattn` command of an installed package: the lab's C++ command-line program, carried in the
package (qattn/_bin/qattn), started with this interpreter and the package's figure scripts."""
import os
import sys


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    exe = os.path.join(here, "_bin", "qattn")
    if not os.access(exe, os.X_OK):
        sys.exit(f"qattn: error: {exe}: the command-line program is missing from this installation; expected it beside the package "
                 "(reinstall with `pip install .` from the lab's source)")
    os.execv(exe, [exe, "--installed-figures", sys.executable, os.path.join(here, "_figures"), *sys.argv[1:]])
