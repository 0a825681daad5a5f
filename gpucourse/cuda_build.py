"""Build CUDA C++ for the course: ``build`` (load_inline with course defaults) and ``compile_check`` (nvcc only).

A CUDA source in this course comes in two strings:

* ``kernels``: the ``__global__`` functions and their device helpers, plain CUDA C++ with no torch header, so that
  ``nvcc`` alone can compile it on a machine without a GPU or a CUDA build of torch (CPU mode);
* ``binding``: a small host function that takes ``torch::Tensor`` arguments, launches the kernels on torch's current
  stream and checks the launch. ``cpp`` declares the bound functions for ``load_inline``'s generated Python module.

``build`` compiles both with ``torch.utils.cpp_extension.load_inline`` into a build directory named after a hash of
the sources and flags, so an unchanged cell loads in well under a second and a changed one rebuilds only itself.
In CPU mode it cannot load anything (a CPU-only torch has no CUDA runtime to load into), so it compile-checks the
kernels with ``nvcc`` and raises :class:`NeedsGPU` carrying the compiler's report: the exercise checker turns that
into "compiles; running it needs a GPU". Compile errors are raised as :class:`CudaCompileError` whose message is the
compiler's own output, not a Python stack.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from . import device

DEFAULT_ARCH = "sm_90"  # CPU mode compiles for the course's H100; on a GPU the device's own arch is used
NVCC_FLAGS = ("-O3", "-std=c++17", "-lineinfo")  # no --use_fast_math: sums must not change with it
# Only what a binding needs: torch's tensor type, the current stream and the launch check. torch/extension.h (all of
# torch's headers) is left to the small generated C++ file that holds the Python bindings.
BINDING_HEADERS = ("#include <torch/types.h>\n#include <c10/cuda/CUDAStream.h>\n"
                   "#include <c10/cuda/CUDAException.h>\n#include <c10/cuda/CUDAGuard.h>\n")


class CudaCompileError(RuntimeError):
    """nvcc (or the host compiler) rejected the source; the message is the compiler's output."""


class ToolMissing(RuntimeError):
    """nvcc or ninja is not installed; the message names the fix."""


class NeedsGPU(RuntimeError):
    """CPU mode: the source compiled (``.report``) but running it needs a CUDA GPU."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


# ---------------------------------------------------------------------------------------------------------------------
# Tools and places.


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
    """``sm_XY`` of the current GPU in GPU mode, the course default (sm_90) in CPU mode."""
    sm = device.sm_number()
    return f"sm_{sm}" if sm else DEFAULT_ARCH


# ---------------------------------------------------------------------------------------------------------------------
# Compile reports: what ptxas says about each kernel.


@dataclasses.dataclass
class KernelResources:
    name: str  # the kernel's source name (the mangled symbol demangled to its identifier)
    symbol: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0


@dataclasses.dataclass
class CompileReport:
    arch: str
    kernels: dict  # name -> KernelResources
    log: str  # ptxas -v output, verbatim
    seconds: float
    cached: bool = False
    object_path: str | None = None

    def table(self) -> str:
        rows = [f"{'kernel':<28}{'registers':>10}{'shared B':>10}{'stack B':>9}{'spills (st/ld) B':>18}"]
        for k in self.kernels.values():
            rows.append(f"{k.name:<28}{k.registers:>10}{k.shared_bytes:>10}{k.stack_bytes:>9}"
                        f"{f'{k.spill_stores}/{k.spill_loads}':>18}")
        return "\n".join(rows)

    def __str__(self) -> str:
        return f"compiled for {self.arch} in {self.seconds:.1f} s{' (cached)' if self.cached else ''}\n{self.table()}"


def short_name(symbol: str) -> str:
    """``_Z10sum_atomicPKfxPf`` -> ``sum_atomic``; templates and namespaces keep their first identifier."""
    m = re.match(r"_Z(?:N\d*)?(\d+)", symbol)
    if not m:
        return symbol
    start = m.end()
    return symbol[start:start + int(m.group(1))]


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(log: str) -> dict:
    """Per-kernel resources from ``ptxas -v`` output (the format of CUDA 11 to 13): name -> KernelResources."""
    kernels, current, props_of = {}, None, None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            sym = m.group(1)
            current = kernels.setdefault(sym, KernelResources(name=short_name(sym), symbol=sym))
            continue
        m = _PROPS.search(line)
        if m:
            props_of = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and props_of in kernels:
            k = kernels[props_of]
            k.stack_bytes, k.spill_stores, k.spill_loads = map(int, m.groups())
            continue
        m = _USED.search(line)
        if m and current is not None:
            current.registers = int(m.group(1))
            b = _BARRIERS.search(line)
            current.barriers = int(b.group(1)) if b else 0
            s = _SMEM.search(line)
            current.shared_bytes = int(s.group(1)) if s else 0
    return {k.name: k for k in kernels.values()}


def _compiler_message(text: str, filename: str = "kernels.cu") -> str:
    """The compiler's diagnostics, with the temporary directory taken out of file names."""
    text = re.sub(r"[^\s\"']*/(kernels\.cu|cuda\.cu|main\.cpp)", r"\1", text)
    skip = ("[", "FAILED:", "ninja:", "Error building")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(skip)
             and "-gencode" not in ln and " -c " not in ln]
    first_error = next((i for i, ln in enumerate(lines) if "error" in ln.lower()), 0)
    return "\n".join(lines[first_error:first_error + 60]) or text.strip()  # warnings from torch's headers before
    # the first error are noise here


_reports: dict = {}


def compile_check(kernels: str, arch: str | None = None, flags=(), *, cache: bool = True,
                  keep_object: bool = False) -> CompileReport:
    """Compile ``kernels`` (torch-free CUDA C++) with ``nvcc -c -Xptxas -v``; no GPU and no CUDA torch needed.

    Returns a CompileReport (registers, shared memory, stack and spills per kernel, from ptxas). Raises
    CudaCompileError with the compiler's message, or ToolMissing when nvcc is absent. Reports are cached on disk
    by a hash of the source, arch and flags, so each source is compiled once per machine (``cache=False`` forces it).
    """
    arch = arch or device_arch()
    nvcc = require_tools(ninja=False)
    key = _hash(kernels, arch, tuple(flags), NVCC_FLAGS)
    if cache and key in _reports and not keep_object:
        return dataclasses.replace(_reports[key], cached=True)
    path = os.path.join(cache_dir(), f"check_{key}.json")
    if cache and not keep_object and os.path.exists(path):
        with open(path) as f:
            d = json.load(f)
        rep = CompileReport(arch=d["arch"], kernels={k: KernelResources(**v) for k, v in d["kernels"].items()},
                            log=d["log"], seconds=d["seconds"], cached=True)
        _reports[key] = rep
        return rep
    work = tempfile.mkdtemp(prefix="gpucourse-nvcc-", dir=cache_dir())
    src, obj = os.path.join(work, "kernels.cu"), os.path.join(work, "kernels.o")
    with open(src, "w") as f:
        f.write(kernels)
    cmd = [nvcc, "-c", src, "-o", obj, f"-arch={arch}", "-Xptxas", "-v", *NVCC_FLAGS, *flags]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise CudaCompileError("nvcc could not compile the kernels:\n" + _compiler_message(proc.stderr + proc.stdout))
    log = "\n".join(ln for ln in (proc.stderr + proc.stdout).splitlines() if "ptxas" in ln or "bytes" in ln)
    rep = CompileReport(arch=arch, kernels=parse_ptxas(log), log=log, seconds=seconds,
                        object_path=obj if keep_object else None)
    if keep_object:
        return rep
    shutil.rmtree(work, ignore_errors=True)
    _reports[key] = rep
    tmp = f"{path}.{os.getpid()}.tmp"  # several processes (pytest workers, notebooks) may compile the same source
    with open(tmp, "w") as f:
        json.dump({"arch": arch, "kernels": {k: dataclasses.asdict(v) for k, v in rep.kernels.items()},
                   "log": log, "seconds": seconds}, f)
    os.replace(tmp, path)
    return rep


def sass(kernels: str, kernel: str | None = None, arch: str | None = None) -> str:
    """The SASS (machine code) of ``kernels``, or of one kernel, via ``cuobjdump -sass``; ToolMissing without it."""
    cuobjdump = tool("cuobjdump")
    if cuobjdump is None:
        raise ToolMissing("cuobjdump was not found (it ships with the full CUDA toolkit, next to nvcc)")
    rep = compile_check(kernels, arch, keep_object=True)
    try:
        text = subprocess.run([cuobjdump, "-sass", rep.object_path], capture_output=True, text=True,
                              check=True).stdout
    finally:
        shutil.rmtree(os.path.dirname(rep.object_path), ignore_errors=True)
    if kernel is None:
        return text
    blocks = re.split(r"(?=\n\s*Function : )", text)
    mine = [b for b in blocks if re.search(rf"Function : \S*{re.escape(kernel)}", b)]
    return "\n".join(mine) if mine else text


# ---------------------------------------------------------------------------------------------------------------------
# Building and loading (GPU mode).

_modules: dict = {}
_by_args: dict = {}


def forget_loaded() -> None:
    """Forget the modules built in this process, so the next :func:`build` loads from the build directory (what a
    fresh process would do; lesson 04 times that)."""
    _modules.clear()
    _by_args.clear()


def build(name: str, kernels: str, binding: str, cpp: str, functions, *, flags=(), verbose: bool = False):
    """Compile ``kernels`` + ``binding`` with load_inline and return the Python module with ``functions``.

    ``name``: a Python identifier; the build directory and module are named ``<name>_<hash>``, so editing a source
    makes a new build and an unchanged one is loaded from the cache (also in memory within one process).
    CPU mode: compile-checks ``kernels`` with nvcc and raises NeedsGPU (with the report); CudaCompileError on
    errors, ToolMissing when nvcc/ninja are absent.
    """
    if not name.isidentifier():
        raise ValueError(f"build name must be a Python identifier, not {name!r}")
    functions = [functions] if isinstance(functions, str) else list(functions)
    # Called again with the same sources (a workbook's wrapper calls build on every call): found by the arguments
    # themselves. Python caches each string's hash, so this costs ~1 µs, where hashing the sources costs ~90 µs.
    args_key = (name, kernels, binding, cpp, tuple(functions), tuple(flags))
    if args_key in _by_args:
        return _by_args[args_key]
    if not device.on_gpu():
        report = compile_check(kernels, flags=flags)
        raise NeedsGPU(f"{name}: the CUDA kernels compile ({', '.join(report.kernels) or 'no kernels'}); "
                       f"running them needs a CUDA GPU (CPU mode)", report)
    key = _hash(kernels, binding, cpp, functions, tuple(flags), NVCC_FLAGS, device_arch())
    if key in _modules:
        _by_args[args_key] = _modules[key]
        return _modules[key]
    require_tools(ninja=True)
    import torch.utils.cpp_extension as ext

    full = f"{name}_{key}"
    build_dir = os.path.join(cache_dir(), full)
    os.makedirs(build_dir, exist_ok=True)
    try:
        module = ext.load_inline(name=full, cpp_sources=[cpp], cuda_sources=[BINDING_HEADERS + kernels + "\n" +
                                                                              binding],
                                 functions=functions, extra_cuda_cflags=[*NVCC_FLAGS, *flags],
                                 extra_cflags=["-O2"], build_directory=build_dir, verbose=verbose)
    except RuntimeError as exc:  # ninja's output holds the compiler's diagnostics
        if "Error building extension" in str(exc):
            raise CudaCompileError(f"building {name} failed:\n" + _compiler_message(str(exc))) from None
        raise
    module.kernels_source = kernels
    _modules[key] = _by_args[args_key] = module
    return module
