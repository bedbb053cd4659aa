"""Intact files are never called corrupt when two threads use them: score_files (which releases
the GIL) in one thread and load_layer / read_outputs in another used to fork the probe child while
the other thread was inside libhdf5, and the child deadlocked there until its 10 s alarm."""
import threading

import numpy as np

import qattn


def test_reads_beside_a_scoring_thread(dump, tmp_path):
    d = qattn.load_layer(dump, "0", tokens=64)
    out = str(tmp_path / "k.h5")
    ref = qattn.reference(d["q"], d["k"], d["v"], causal=True)["out"].astype(np.float32)
    qattn.write_outputs(out, "k", [{"layer": "0", "o": ref}])
    errors, stop = [], threading.Event()

    def scoring():
        try:
            for i in range(12):
                qattn.score_files(dump, [out], str(tmp_path / f"r{i}"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"score_files: {e}")
        finally:
            stop.set()

    t = threading.Thread(target=scoring)
    t.start()
    calls = 0
    while not stop.is_set():
        try:
            # A whole layer at every token: most of this thread's time is spent inside libhdf5.
            qattn.load_layer(dump, "15")
            qattn.read_outputs(out)
        except Exception as e:  # noqa: BLE001
            errors.append(f"reader: {e}")
            break
        calls += 1
    t.join()
    assert not errors, errors
    assert calls > 0
