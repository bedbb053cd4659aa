"""Report folders shared between commands: --force takes the folder's lock before it removes
anything, so it never deletes under another writer; it removes the report's own files only (a
user's notes and the kernel outputs in outputs/ stay)."""
import fcntl
import json
import os
import subprocess

import numpy as np

import qattn


def experiment(dump, out):
    return {"name": "shared", "dataset": dump, "selection": {"layers": [0], "heads": [0], "contexts": [128], "rows": 16},
            "recipes": {"int8": "q=int8/token k=int8/token"}, "output": out}


def snapshot(folder):
    """Every file under folder with its bytes."""
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            files[os.path.relpath(p, folder)] = open(p, "rb").read()
    return files


def outputs_file(dump, path):
    d = qattn.load_layer(dump, "0", tokens=64)
    ref = qattn.reference(d["q"], d["k"], d["v"], causal=True)["out"].astype(np.float32)
    qattn.write_outputs(path, "float32-reference", [{"layer": "0", "o": ref}])


def test_force_waits_for_no_one_and_deletes_nothing_under_a_lock(dump, qattn_exe, tmp_path):
    out = str(tmp_path / "report")
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(experiment(dump, out)))
    r = subprocess.run([qattn_exe, "run", str(path), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(out, "notes.txt"), "w") as f:
        f.write("mine")
    outputs = str(tmp_path / "k.h5")
    outputs_file(dump, outputs)
    before = snapshot(out)
    with open(os.path.join(out, ".lock"), "a") as held:  # another writer, mid-run
        fcntl.flock(held, fcntl.LOCK_EX)
        for cmd in ([qattn_exe, "run", str(path), "--force", "--quiet"], [qattn_exe, "score", dump, outputs, "-o", out, "--force", "--quiet"]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            assert r.returncode == 1 and "another qattn command is writing this report folder; nothing in it was changed" in r.stderr, r.stderr
            assert snapshot(out) == before, f"{cmd[1]} --force changed a locked report"


def test_score_force_keeps_user_files_and_given_outputs(dump, qattn_exe, tmp_path):
    rep = tmp_path / "rep"
    os.makedirs(rep / "outputs")
    outputs = str(rep / "outputs" / "k.h5")
    outputs_file(dump, outputs)
    r = subprocess.run([qattn_exe, "score", dump, outputs, "-o", str(rep), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 1 and "exists" in r.stderr, r.stderr  # a folder it did not write
    os.remove(outputs)
    os.rmdir(rep / "outputs")
    os.rmdir(rep)
    outputs = str(tmp_path / "k.h5")
    outputs_file(dump, outputs)
    r = subprocess.run([qattn_exe, "score", dump, outputs, "-o", str(rep), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    os.makedirs(rep / "outputs")
    os.replace(outputs, rep / "outputs" / "k.h5")
    (rep / "notes.txt").write_text("mine")
    first = json.loads((rep / "results.jsonl").read_text().splitlines()[0])
    # The outputs it is given live in the folder it replaces.
    r = subprocess.run([qattn_exe, "score", dump, str(rep / "outputs" / "k.h5"), "-o", str(rep), "--force", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (rep / "outputs" / "k.h5").exists() and (rep / "notes.txt").read_text() == "mine"
    again = json.loads((rep / "results.jsonl").read_text().splitlines()[0])
    assert again["sqnr_db"] == first["sqnr_db"]
    assert len((rep / "results.jsonl").read_text().splitlines()) == 9  # replaced, not appended


def test_force_never_reaches_outside_the_folder(dump, qattn_exe, tmp_path):
    """An empty output is refused (it once meant the current folder); a figures/ that links to a
    folder of the user's is left alone by --force; a .tmp name linked to a user's file is removed,
    never written through."""
    outputs = str(tmp_path / "k.h5")
    outputs_file(dump, outputs)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "config.json").write_text('{"git_commit": "x", "command_line": "y"}')  # looks like a report
    (cwd / "results.csv").write_text("the user's")
    r = subprocess.run([qattn_exe, "score", dump, outputs, "-o", "", "--force", "--quiet"], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 1 and "--output: empty" in r.stderr, r.stderr
    here = os.getcwd()
    os.chdir(cwd)
    try:
        import pytest
        with pytest.raises(ValueError, match="report folder: empty path"):
            qattn.score(lambda q, k, v, **kw: q, dump, layers=[0], contexts=[64], output="", force=True)
    finally:
        os.chdir(here)
    assert (cwd / "results.csv").read_text() == "the user's"

    rep = tmp_path / "rep"
    r = subprocess.run([qattn_exe, "score", dump, outputs, "-o", str(rep), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    pics = tmp_path / "pics"
    pics.mkdir()
    (pics / "holiday.png").write_bytes(b"not a figure")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    import shutil
    shutil.rmtree(rep / "figures")
    os.symlink(pics, rep / "figures")
    os.symlink(victim, rep / ".qattn-report.tmp")
    r = subprocess.run([qattn_exe, "score", dump, outputs, "-o", str(rep), "--force", "--quiet"], capture_output=True, text=True)
    assert (pics / "holiday.png").read_bytes() == b"not a figure"
    assert victim.read_text() == "keep"


def test_a_second_thread_is_refused_like_a_second_process(dump, tmp_path):
    """The folder lock is shared by nested claims on one thread (qattn.score around score_files),
    not by two threads: the second is refused before anything changes."""
    import threading

    outputs = str(tmp_path / "k.h5")
    outputs_file(dump, outputs)
    rep = str(tmp_path / "rep")
    errors = []
    with qattn._core.claim_report_for(rep, "test", force=False, resume=False):
        qattn.score_files(dump, [outputs], rep, force=True)  # the same thread: shares the claim

        def other():
            try:
                qattn.score_files(dump, [outputs], rep, force=True)
            except ValueError as e:
                errors.append(str(e))

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert errors and "a thread of this process) is writing this report folder" in errors[0], errors
    assert len(open(os.path.join(rep, "results.jsonl")).read().splitlines()) == 9
