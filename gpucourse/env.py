"""What this session runs on: versions, a short fingerprint, and setup(), the first call in every notebook."""
from __future__ import annotations

import importlib.metadata
import platform

from . import device, nvidia_smi


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    """Versions of everything a result depends on (JSON-serialisable)."""
    import torch

    p = device.props()
    info = {
        "gpucourse": _dist_version("gpucourse"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": _dist_version("triton"),
        "numpy": _dist_version("numpy"),
        "driver": nvidia_smi.driver_version(),
        "mode": device.mode(),
        "gpu": p.name if p else None,
        "compute_capability": f"{p.major}.{p.minor}" if p else None,
    }
    return info


def fingerprint(v: dict | None = None) -> str:
    """One line naming the GPU, driver, torch and triton: enough to tell two grading machines apart."""
    v = v or versions()
    return (f"{v['gpu'] or 'CPU'} | driver {v['driver'] or '-'} | torch {v['torch']} | "
            f"triton {v['triton'] or '-'} | {v['mode']} mode")


def mode_line() -> str:
    v = versions()
    if v["mode"] == "gpu":
        p = device.props()
        where = (f"GPU mode: {p.name} (sm{p.sm}, {p.sm_count} SMs, {p.total_memory / 2**30:.0f} GiB, "
                 f"L2 {p.l2_bytes / 2**20:.0f} MiB)")
    else:
        where = "CPU mode: no CUDA GPU in use. Triton runs in its interpreter at small sizes; timings are CPU timings"
    return (f"{where}\n  torch {v['torch']}" + (f" (CUDA {v['torch_cuda']})" if v["torch_cuda"] else "")
            + f", triton {v['triton'] or 'not installed'}, Python {v['python']}")


def setup(mode: str | None = None, quiet: bool = False) -> str:
    """First call of every notebook: select GPU or CPU mode (``mode`` forces one) and print the mode line.

    Returns the mode. Must run before ``import triton`` — ``import gpucourse`` already guarantees that when it is
    the notebook's first import. On a GPU it also calibrates ``asyncqueue.sleep_kernel`` (a few milliseconds), so
    that the first sleep a lesson times is not the calibration.
    """
    selected = device.select_mode(mode)
    if selected == "gpu":
        from . import asyncqueue

        asyncqueue.cycles_per_ms()
    if not quiet:
        print(mode_line())
        if device.in_colab() and selected == "cpu":
            print("  On Colab: Runtime > Change runtime type > T4 GPU gives you GPU mode.")
    return selected
