"""Arrays that describe more than they hold: a stride-0 NumPy view costs NumPy nothing, whatever
its shape. Each is refused with a ValueError naming the argument, before any buffer is allocated;
none crashes the interpreter or is killed for memory."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qattn


def view(shape):
    """A float32 array of any shape over one element of memory."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=shape, strides=(0,) * len(shape))


# One dimension past the int the lab indexes with (2^32 + 1 wrapped to 1 in the old cast).
TALL = (1, 2**32 + 1, 1)
# Every dimension an int, the whole far past any machine's memory (2^50 elements, 4 PiB as float32).
VAST = (2**20, 2**20, 2**10)


@pytest.mark.parametrize("call, name", [
    (lambda a: qattn.quantize(a, "int8/token"), "x"),
    (lambda a: qattn.reference(a, a, a), "q"),
    (lambda a: qattn.emulate(a, a, a, "q=int8/token k=int8/token"), "q"),
    (lambda a: qattn.channel_outliers(a, 0), "t"),
])
def test_dimension_beyond_int_is_refused(call, name):
    with pytest.raises(ValueError, match=rf"^{name}: shape \(1, 4294967297, 1\): dimension 1 is larger than 2147483647"):
        call(view(TALL))


@pytest.mark.parametrize("call, name", [
    (lambda a: qattn.quantize(a, "int8/token"), "x "),
    (lambda a: qattn.reference(a, a, a), "q, k, v"),
    (lambda a: qattn.emulate(a, a, a, "q=int8/token"), "q, k, v"),
    (lambda a: qattn.channel_outliers(a, 0), "t "),
    (lambda a: qattn.compare(a, a), "ref, x "),
    (lambda a: qattn.round_to(a, "e4m3"), "x "),
    (lambda a: qattn.encode(a, "e4m3"), "x "),
])
def test_more_than_the_machine_holds_is_refused(call, name):
    with pytest.raises(ValueError, match=r"needs [0-9.]+ PiB of memory; [0-9.]+ [KMGT]iB is available") as e:
        call(view(VAST))
    assert str(e.value).startswith(name), str(e.value)


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""), reason="AddressSanitizer's shadow memory needs an unlimited address space")
def test_call_that_fits_per_tensor_but_not_in_all_is_refused(tmp_path):
    """q, k and v each fit under the limit, the three with the float64 output do not: refused
    before the first is copied (an address-space limit stands in for a small machine)."""
    script = textwrap.dedent("""
        import resource, numpy as np, qattn
        limit = 4 << 30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        a = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(1, 2**26, 5), strides=(0, 0, 0))  # 1.25 GiB as float32
        try:
            qattn.reference(a, a, a)
        except ValueError as e:
            print("REFUSED", e)
        except MemoryError as e:
            print("MEMORY-ERROR", e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("REFUSED q, k, v") and "needs 6.2 GiB of memory" in r.stdout, r.stdout
