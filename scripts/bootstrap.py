#!/usr/bin/env python3
"""Create the course's virtual environment and install the course into it. Needs nothing but Python 3.10+.

Which torch it installs:
- torch already importable by this Python (Colab, a cluster image, a conda env): the venv sees the system's packages
  and reuses that torch, CUDA build and all;
- an NVIDIA GPU present (nvidia-smi lists one): torch from PyPI, the CUDA build;
- neither: the CPU build, from PyTorch's CPU index (a few hundred MB instead of several GB of CUDA libraries).
Then ``pip install -e .[lab,test,check]`` adds the course and what it needs, with JupyterLab, the test suite and
the linter (``make check``).

Last, bubblewrap (``bwrap``), the sandbox ``gpucourse grade`` runs each submission in: installed with apt-get when
this runs as root on a Debian-like system and it is missing; otherwise the command to install it is printed. The
course works without it (the grader then isolates submissions at the process level only, and says so), so a
failure here never fails the install. ``--only-bubblewrap`` does just this step (CI runs it before the tests).

Chromium, the browser tests/test_browser.py opens JupyterLab in (through playwright, which is told to use it and
downloads no browser of its own): ``--only-chromium`` installs Debian's ``chromium`` the same way (root and apt-get;
otherwise it prints the command). CI runs it; the full install only says whether it is there, since a learner's
``make lab`` has no use for a second browser. Without it the browser test skips, saying why (CI requires it).

Slurm and munge, for tests/test_slurm.py (a class graded as a Slurm job array, docs/slurm/): ``--only-slurm``
installs Debian's ``slurm-wlm`` and ``munge`` the same way; CI runs it, the full install does not.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def say(msg: str) -> None:
    print(f"[bootstrap] {msg}", flush=True)


def apt_install(packages: list, installed, show: bool = False) -> bool:
    """``apt-get install`` of ``packages`` (once more after ``apt-get update`` when that fails: the package lists
    may be missing, as in a fresh image); True when it succeeded and ``installed()`` says they are there. ``show``:
    the install's own output is printed (the update's never is)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install_cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    for cmd in (install_cmd, ["apt-get", "update", "-q"], install_cmd):
        say("$ " + " ".join(cmd))
        try:
            rc = subprocess.call(cmd, env=env, stdout=None if show and cmd is install_cmd else subprocess.DEVNULL)
        except OSError as exc:
            rc = f"{exc}"
        if rc == 0 and cmd is install_cmd and installed():
            return True
    return False


def run(cmd: list, check: bool = True) -> int:
    say("$ " + " ".join(str(c) for c in cmd))
    rc = subprocess.call([str(c) for c in cmd])
    if check and rc != 0:
        sys.exit(f"[bootstrap] command failed with exit status {rc}: {' '.join(map(str, cmd))}")
    return rc


def has_torch(python: str) -> bool:
    return subprocess.call([python, "-c", "import torch"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


def has_nvidia_gpu() -> bool:
    """nvidia-smi lists a GPU. Asked through the course's own nvidia-smi reader, loaded from its file: the package
    itself cannot be imported yet (it needs torch, which is what we are about to choose)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_gpucourse_nvidia_smi", ROOT / "gpucourse" / "nvidia_smi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return bool(module.gpus())


def cpu_torch_version(py: str) -> str | None:
    """The newest torch CPU build ("2.x.y+cpu") that pip can see, PyTorch's CPU index included, or None."""
    out = subprocess.run([py, "-m", "pip", "index", "versions", "torch", "--index-url", CPU_INDEX,
                          "--retries", "1", "--timeout", "15", "--disable-pip-version-check"],
                         capture_output=True, text=True)
    m = re.search(r"Available versions:\s*(.*)", out.stdout)
    versions = [v.strip() for v in m.group(1).split(",")] if m else []
    cpu = [v for v in versions if v.endswith("+cpu")]
    return cpu[0] if cpu else None  # pip lists newest first


def install_cpu_torch(py: str, pip: list) -> None:
    """Install a CPU-only torch: a few hundred MB instead of several GB of CUDA libraries nobody will use."""
    version = cpu_torch_version(py)
    if version:
        say(f"no NVIDIA GPU: installing the CPU build of torch ({version})")
        run(pip + ["--no-deps", "--retries", "1", "--timeout", "15", "--index-url", CPU_INDEX,
                   f"torch=={version}"])
    else:
        say("no NVIDIA GPU, but no CPU build of torch is reachable (PyTorch's CPU index is blocked?): installing "
            "torch from PyPI, which brings CUDA libraries (several GB) that CPU mode does not use")
        run(pip + ["torch>=2.3"])


BWRAP_MANUAL = ("sudo apt-get install bubblewrap (Debian/Ubuntu), sudo dnf install bubblewrap (Fedora); "
                "`gpucourse doctor` shows the isolation `gpucourse grade` gets")


def ensure_bubblewrap() -> bool:
    """bubblewrap on PATH, installed with apt-get if this is root and it is missing; True when it is there. Never
    fails: without it the grader still runs, at the process level."""
    if shutil.which("bwrap"):
        say(f"bubblewrap found ({shutil.which('bwrap')}): `gpucourse grade` runs each submission in a sandbox")
        return True
    if not sys.platform.startswith("linux"):
        say("no bubblewrap (Linux only): `gpucourse grade` will isolate submissions at the process level only")
        return False
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        say(f"bubblewrap is not installed, so `gpucourse grade` isolates submissions at the process level only. "
            f"To sandbox them: {BWRAP_MANUAL}")
        return False
    say("installing bubblewrap, the sandbox `gpucourse grade` runs submissions in")
    if apt_install(["bubblewrap"], lambda: bool(shutil.which("bwrap")), show=True):
        return True
    say(f"could not install bubblewrap (apt-get said no): `gpucourse grade` isolates submissions at the process "
        f"level only until it is installed: {BWRAP_MANUAL}")
    return False


CHROMIUM_MANUAL = ("sudo apt-get install chromium (Debian/Ubuntu), sudo dnf install chromium (Fedora); then "
                   "tests/test_browser.py runs the notebooks in JupyterLab in it")


def chromium_path() -> str | None:
    """The Chromium the browser test drives: $GPUCOURSE_CHROMIUM, else chromium / chromium-browser on PATH."""
    given = os.environ.get("GPUCOURSE_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def ensure_chromium(install: bool = True) -> bool:
    """Chromium for the browser test, installed with apt-get if this is root on Debian and it is missing
    (``install``); True when it is there. Never fails: without it the browser test skips, saying why."""
    if chromium_path():
        say(f"chromium found ({chromium_path()}): tests/test_browser.py runs the notebooks in JupyterLab in it")
        return True
    if not install or not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("apt-get"):
        say(f"chromium is not installed, so tests/test_browser.py skips. To run it: {CHROMIUM_MANUAL}")
        return False
    say("installing chromium, the browser tests/test_browser.py opens JupyterLab in")
    if apt_install(["chromium"], lambda: bool(chromium_path())):
        return True
    say(f"could not install chromium (apt-get said no): tests/test_browser.py skips until it is: {CHROMIUM_MANUAL}")
    return False


SLURM_MANUAL = ("sudo apt-get install slurm-wlm munge (Debian/Ubuntu); then tests/test_slurm.py starts a one-node "
                "Slurm of its own, as root, and grades a class as a job array on it")
SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")


def ensure_slurm() -> bool:
    """Slurm (Debian's slurm-wlm: slurmctld, slurmd and the sbatch client) and munge, its authentication, for
    tests/test_slurm.py, which grades a class as a job array on a one-node Slurm it starts: installed with apt-get
    if this is root on Debian and they are missing; True when they are there. Never fails: without them the test
    skips, saying why (CI requires it)."""
    missing = [b for b in SLURM_BINARIES if not shutil.which(b)]
    if not missing:
        say(f"slurm and munge found ({shutil.which('slurmctld')}): tests/test_slurm.py runs a job array on them")
        return True
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("apt-get"):
        why = ("not Linux" if not sys.platform.startswith("linux") else "not root" if os.geteuid() != 0
               else "no apt-get")
        say(f"{', '.join(missing)} not installed ({why}), so tests/test_slurm.py skips. To run it: {SLURM_MANUAL}")
        return False
    say("installing slurm-wlm and munge, the one-node Slurm tests/test_slurm.py grades a job array on")
    if apt_install(["slurm-wlm", "munge"], lambda: all(shutil.which(b) for b in SLURM_BINARIES)):
        return True
    say(f"could not install slurm-wlm and munge (apt-get said no): tests/test_slurm.py skips until they are: "
        f"{SLURM_MANUAL}")
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=str(ROOT / ".venv"))
    ap.add_argument("--only-bubblewrap", action="store_true", help="only install bubblewrap (the grader's sandbox)")
    ap.add_argument("--only-chromium", action="store_true",
                    help="only install chromium (the browser test's; may be given with --only-bubblewrap)")
    ap.add_argument("--only-slurm", action="store_true",
                    help="only install slurm-wlm and munge (tests/test_slurm.py's one-node Slurm; may be given with "
                         "the other --only options)")
    args = ap.parse_args()
    if args.only_bubblewrap or args.only_chromium or args.only_slurm:
        if args.only_bubblewrap:
            ensure_bubblewrap()
        if args.only_chromium:
            ensure_chromium()
        if args.only_slurm:
            ensure_slurm()
        return
    if sys.version_info < (3, 10):
        sys.exit(f"[bootstrap] gpucourse needs Python 3.10 or newer; this is {sys.version.split()[0]}.")
    target = Path(args.venv)
    reuse = has_torch(sys.executable)
    if not (target / "bin" / "python").exists():
        say(f"creating {target}" + (" (reusing this Python's torch via system site-packages)" if reuse else ""))
        venv.EnvBuilder(with_pip=True, system_site_packages=reuse, clear=True).create(target)
    py = str(target / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check"]
    if has_torch(py):
        say("torch is already available: keeping it")
    elif has_nvidia_gpu():
        say("NVIDIA GPU found: installing the CUDA build of torch")
        run(pip + ["torch>=2.3"])
    else:
        install_cpu_torch(py, pip)
    run(pip + ["-e", f"{ROOT}[lab,test,check]"])  # the course, JupyterLab (`make lab`), the tests, the linter
    run([py, "-c", "import gpucourse, torch; print('gpucourse ready: torch', torch.__version__, '|', "
                   "gpucourse.mode(), 'mode')"])
    ensure_bubblewrap()
    ensure_chromium(install=False)


if __name__ == "__main__":
    main()
