"""A configuration file that is a FIFO (no writer), a device or a socket is refused at once, named,
instead of blocking the command forever."""
import os
import socket
import subprocess

import pytest


@pytest.mark.parametrize("command, what", [("run", "experiment file"), ("check", "bounds file")])
def test_fifo_refused(qattn_exe, tmp_path, command, what):
    fifo = tmp_path / "shared.json"
    os.mkfifo(fifo)
    r = subprocess.run([qattn_exe, command, str(fifo)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert f"{fifo}: is a FIFO; expected the {what}" in r.stderr, r.stderr


def test_device_and_socket_refused(qattn_exe, tmp_path):
    r = subprocess.run([qattn_exe, "run", "/dev/zero"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "/dev/zero: is a device; expected the experiment file" in r.stderr, r.stderr
    path = str(tmp_path / "s.json")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)
        r = subprocess.run([qattn_exe, "check", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"{path}: is a socket; expected the bounds file" in r.stderr, r.stderr
