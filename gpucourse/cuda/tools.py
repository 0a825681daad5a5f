"""The CUDA toolchain and places: nvcc and its tools, the toolkit's root, the cache folder, the arch to compile for,
the compiler flags every build uses, and the errors the builder raises."""
from __future__ import annotations

import hashlib
import os
import re
import shutil

from .. import device

DEFAULT_ARCH = "sm_90"  # CPU mode compiles for the course's H100; on a GPU the device's own arch is used
NVCC_FLAGS = ("-O3", "-std=c++17", "-lineinfo")  # no --use_fast_math: sums must not change with it
MAIN_CFLAGS = ("-O2",)  # main.cpp's flags, the precompiled header's too (gcc uses a .gch only with the same ones)
# Set by the grader for a CUDA submission's two workers: the GPU's arch, so both compute the same build key (the
# first worker sees no GPU; see build.PREBUILD_ENV).
ARCH_ENV = "GPUCOURSE_CUDA_ARCH"


# The errors carry their public path (gpucourse.cuda_build), which tracebacks and grading messages print.
class CudaCompileError(RuntimeError):
    """nvcc (or the host compiler) rejected the source; the message is the compiler's output."""

    __module__ = "gpucourse.cuda_build"
    raw = ""  # the build's whole output (the message is its diagnostics)


class ToolMissing(RuntimeError):
    """nvcc or ninja is not installed; the message names the fix."""

    __module__ = "gpucourse.cuda_build"


def nvcc_path() -> str | None:
    """nvcc on PATH, else under CUDA_HOME/CUDA_PATH, else the usual /usr/local/cuda; None when absent."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


def tool(name: str) -> str | None:
    """A CUDA tool (cuobjdump, compute-sanitizer, ncu) next to nvcc or on PATH; None when absent."""
    found = shutil.which(name)
    if found:
        return found
    nvcc = nvcc_path()
    if nvcc:
        cand = os.path.join(os.path.dirname(nvcc), name)
        if os.path.exists(cand):
            return cand
    return None


def cuda_home() -> str | None:
    """The CUDA toolkit's root (the folder with include/cuda_runtime.h): $CUDA_HOME, $CUDA_PATH, /usr/local/cuda or
    nvcc's grandparent (nvcc may be a wrapper script elsewhere on PATH); None when none has the headers."""
    nvcc = nvcc_path()
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             nvcc and os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))]
    return next((h for h in homes if h and os.path.exists(os.path.join(h, "include", "cuda_runtime.h"))), None)


def require_tools(ninja: bool = True) -> str:
    """The nvcc path; ToolMissing naming the fix when nvcc (or, for ``build``, ninja) is missing."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise ToolMissing("nvcc (the CUDA compiler) was not found: install the CUDA toolkit that matches torch's "
                          "CUDA version (`gpucourse doctor` shows both) and put its bin/ on PATH, or set CUDA_HOME. "
                          "On Colab nvcc is preinstalled.")
    if ninja and shutil.which("ninja") is None:
        raise ToolMissing("ninja was not found: torch.utils.cpp_extension builds with it. Fix: pip install ninja")
    return nvcc


def cache_dir() -> str:
    """Where builds and compile reports are kept: $GPUCOURSE_CACHE or ~/.cache/gpucourse/cuda."""
    root = os.environ.get("GPUCOURSE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gpucourse")
    path = os.path.join(root, "cuda")
    os.makedirs(path, exist_ok=True)
    return path


def _hash(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def device_arch() -> str:
    """``sm_XY`` of the current GPU in GPU mode, the course default (sm_90) in CPU mode; $GPUCOURSE_CUDA_ARCH where
    the grader set it (its GPU's, for a worker that sees none)."""
    if re.fullmatch(r"sm_\d+a?", os.environ.get(ARCH_ENV, "")):
        return os.environ[ARCH_ENV]
    p = device.hardware_props()  # the real GPU's, even where $GPUCOURSE_CAPABILITY lowers what lessons see
    return f"sm_{p.sm}" if p else DEFAULT_ARCH
