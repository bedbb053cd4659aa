"""A unit is finished only when every one of its rows is in the log: a run cut at any byte of its
logs (a crash, a full disk's short write) resumes to the rows of an uninterrupted run, with no row
lost and none doubled. The cuts land at random bytes and, the case a line-based reader misses, at
the line breaks inside a unit."""
import json
import os
import random
import shutil
import subprocess

LOGS = ("results.jsonl", "stats.jsonl")


def experiment(dump, out):
    return {"name": "torn", "dataset": dump, "selection": {"layers": [0, 15], "heads": [0, 1, 2], "contexts": [64, 128], "rows": 16},
            "kl_rows": 4, "statistics": {"p_formats": ["int8/static:127"]},
            "recipes": {"int8": "q=int8/token k=int8/token", "int8 P": "q=int8/token k=int8/token p=int8/static:127"}, "output": out}


def rows(folder, log):
    with open(os.path.join(folder, log)) as f:
        return sorted(f.read().splitlines())


def run(qattn_exe, path, *args):
    return subprocess.run([qattn_exe, "run", str(path), "--quiet", *args], capture_output=True, text=True)


def test_cut_anywhere_resumes_to_the_same_rows(dump, qattn_exe, tmp_path):
    full = str(tmp_path / "full")
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(experiment(dump, full)))
    r = run(qattn_exe, path)
    assert r.returncode == 0, r.stderr
    want = {log: rows(full, log) for log in LOGS}
    assert len(want["results.jsonl"]) == 2 * 2 * 2 * 3  # layers x contexts x recipes x heads
    assert all(json.loads(x)["unit_rows"] == 3 for x in want["results.jsonl"])

    rng = random.Random(34)
    cuts = []
    for log in LOGS:
        data = open(os.path.join(full, log), "rb").read()
        breaks = [i + 1 for i, b in enumerate(data) if b == ord("\n")][:-1]
        # Line breaks that end a row in the middle of its unit, and random bytes.
        inside = [b for b in breaks if json.loads(data[:b].splitlines()[-1])["unit_rows"] > 1]
        cuts += [(log, b) for b in rng.sample(inside, 3)] + [(log, rng.randrange(1, len(data))) for _ in range(3)]
    for i, (log, at) in enumerate(cuts):
        cut = str(tmp_path / f"cut{i}")
        shutil.copytree(full, cut)
        os.truncate(os.path.join(cut, log), at)
        exp = experiment(dump, cut)
        (tmp_path / f"exp{i}.json").write_text(json.dumps(exp))
        r = run(qattn_exe, tmp_path / f"exp{i}.json", "--resume")
        assert r.returncode == 0, r.stderr
        for other in LOGS:
            assert rows(cut, other) == want[other], f"{log} cut at byte {at}: {other} differs after --resume"
