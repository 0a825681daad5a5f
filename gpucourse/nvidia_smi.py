"""The one place the course asks ``nvidia-smi`` anything. Standard library only: ``scripts/bootstrap.py`` loads this
file before the course (or torch) is installed, to decide which torch build to install."""
from __future__ import annotations

import functools
import re
import shutil
import subprocess


@functools.lru_cache(maxsize=None)
def run(*args: str) -> str | None:
    """What ``nvidia-smi *args`` prints (stdout), or None where there is no driver or it fails. Answers are cached:
    the driver does not change under a running notebook."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def present() -> bool:
    """nvidia-smi is on PATH (a driver is installed), whether or not it works."""
    return shutil.which("nvidia-smi") is not None


def gpus() -> list:
    """The lines of ``nvidia-smi -L`` that name a GPU; [] without a working driver."""
    return [ln for ln in (run("-L") or "").splitlines() if ln.startswith("GPU")]


def driver_version() -> str | None:
    """The NVIDIA driver version, or None where there is no driver."""
    first = (run("--query-gpu=driver_version", "--format=csv,noheader") or "").strip().splitlines()[:1]
    return first[0].strip() if first else None


def driver_cuda_version() -> str | None:
    """The highest CUDA version the installed driver supports, as nvidia-smi's banner prints it."""
    m = re.search(r"CUDA Version:\s*([\d.]+)", run() or "")
    return m.group(1) if m else None
