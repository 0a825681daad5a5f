"""`make lab` starts a JupyterLab server that serves the course and opens the first notebook."""
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.skipif(not (ROOT / ".venv" / ".gpucourse-installed").exists()
                    or Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="runs only inside the venv that `make` created")
def test_make_lab_serves_the_course():
    port, token = _free_port(), "gpucourse-test"
    args = f"--no-browser --port {port} --ServerApp.token={token}"
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api/contents/notebooks/00_start_here.ipynb?content=0&token={token}"
    try:
        deadline, answer = time.time() + 90, None
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    answer = json.load(r)
                break
            except OSError:
                time.sleep(0.5)
        assert answer is not None, "JupyterLab did not answer: " + (proc.stdout.read1(4000).decode()
                                                                    if proc.poll() is not None else "still starting")
        assert answer["path"] == "notebooks/00_start_here.ipynb" and answer["type"] == "notebook"
        # the URL it prints opens lesson 00 itself (issue 35: it opened the Launcher), token included
        printed, deadline = b"", time.time() + 30
        want = b"/lab/tree/notebooks/00_start_here.ipynb?token="  # a token given in config prints as "..."
        while want not in printed and time.time() < deadline:
            if select.select([proc.stdout], [], [], 1.0)[0]:
                printed += proc.stdout.read1(65536)
        assert want in printed, printed.decode(errors="replace")[-2000:]
        assert b"ssh -N -L 8888:localhost:8888" in printed
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=10) as r:
            assert r.status == 200 and b"JupyterLab" in r.read()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
