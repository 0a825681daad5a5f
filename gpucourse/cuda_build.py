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

Where a build's seconds go, and what ``build`` does about it (the grader builds one extension per CUDA submission).
Both translation units parse torch's headers, and that parsing is nearly all of a cold build: ``main.cpp`` (the
Python bindings) includes all of ``torch/extension.h``; the ``.cu`` file includes ``torch/types.h`` for the binding,
and nvcc parses a ``.cu`` file twice, once for the host and once for the device. So, by default (``host``):

* the binding moves to ``main.cpp`` and the ``.cu`` file holds the kernels alone, with no torch header in either of
  nvcc's passes. gcc compiles the binding; each ``kernel<<<grid, block, smem, stream>>>(args)`` in it is rewritten
  as a call of a small launcher that converts the arguments to the kernel's parameter types and calls
  ``cudaLaunchKernel`` with the kernel's host symbol (the ordinary function nvcc defines for every kernel, declared
  in main.cpp from the kernels' own ``__global__`` lines). Sources this cannot carry (:func:`host_binding` says
  which) and any build of it that fails fall back to ``split``;
* ``split``: the device pass sees only the kernels; torch's headers and the binding sit under
  ``#ifndef __CUDA_ARCH__``, as host code (the kernels are torch-free by the course's convention; kernel templates,
  or device code in the binding, keep the old layout, since the device pass must see every instantiation);
* ``main.cpp`` includes a precompiled ``torch/extension.h`` (:data:`PCH_TEXT`) when :func:`prepare_shared` has built
  one for this compiler, these flags and this torch (the grader does, once per machine, before its workers start,
  and binds it read-only into their sandboxes); without one it parses the header as before.

* the grader's **binding object**: main.cpp's other half, the pybind11 module load_inline generates from ``cpp`` and
  ``functions``, is the same for every submission of an exercise and is what needs torch/extension.h, whose cost a
  precompiled header does not remove (gcc instantiates that header's templates at the end of every file that
  includes it). :func:`prepare_binding` compiles it once per exercise into a read-only folder; a build whose
  declarations match links it and compiles only the binding (host.cpp, with a precompiled torch/types.h) or, split,
  only the .cu file. Only where the grader prepared one; any failure builds main.cpp as before (see "The binding
  object" below; ``benchmarks/results/cpu-explore-cuda-binding.json`` has the seconds).

On the H100, one block_sum build took main.cpp 11 s and the .cu file 20 s in the ``split`` layout
(``benchmarks/results/h100-explore-cuda-build-flags.json``).
``GPUCOURSE_CUDA_BUILD=split`` or ``inline`` selects an older layout (``inline``: one ``load_inline``, torch's
headers in both passes). A source that fails to compile split is built the old way before its error is reported,
so the split never turns a source that compiled into one that does not (a kernel that leaned on a type or function
that torch's headers happened to include).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
import re
import shlex
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
BUILD_ENV = "GPUCOURSE_CUDA_BUILD"  # "host" (default), "split" or "inline": the older layouts, kept to compare with
LAYOUTS = ("host", "split", "inline")
SHARED_ENV = "GPUCOURSE_CUDA_SHARED"  # the folder of the precompiled torch/extension.h (set by the grader)
BINDING_ENV = "GPUCOURSE_CUDA_BINDING"  # the folder of the exercise's binding object (set by the grader)
# Set by the grader for a CUDA submission's two workers: the GPU's arch (so both compute the same build key), and,
# in the first one only, PREBUILD_ENV=1: a worker that sees no GPU, whose build() compiles for real (not just the
# nvcc check of CPU mode) into the folder the second worker, on the GPU, then finds up to date.
ARCH_ENV = "GPUCOURSE_CUDA_ARCH"
PREBUILD_ENV = "GPUCOURSE_CUDA_PREBUILD"
PCH_HEADER = "gpucourse_torch_extension.h"  # in that folder, with its .gch beside it
# The precompiled header's text: what every main.cpp of the split and host layouts includes first.
PCH_TEXT = ("// gpucourse: precompiled once for every main.cpp of a split or host-layout CUDA build\n"
            "#include <torch/extension.h>\n" + BINDING_HEADERS +
            "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n")
MAIN_CFLAGS = ("-O2",)  # main.cpp's flags, the precompiled header's too (gcc uses a .gch only with the same ones)
# What makes the device pass need more than the kernels: a kernel template (instantiated where the binding launches
# it) or device code in the binding.
_NEEDS_BOTH_PASSES = re.compile(r"\btemplate\b")
_DEVICE_CODE = re.compile(r"__(global|device|constant|shared|managed)__")


class CudaCompileError(RuntimeError):
    """nvcc (or the host compiler) rejected the source; the message is the compiler's output."""

    raw = ""  # the build's whole output (the message is its diagnostics)


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
    if not device.on_gpu() and os.environ.get(PREBUILD_ENV) == "1" and os.environ.get(ARCH_ENV):
        prebuild(name, kernels, binding, cpp, functions, flags)  # the GPU worker reports; no nvcc check here
        raise NeedsGPU(f"{name}: compiled for {device_arch()} for the grader's GPU worker", None)
    if not device.on_gpu():
        report = compile_check(kernels, flags=flags)
        raise NeedsGPU(f"{name}: the CUDA kernels compile ({', '.join(report.kernels) or 'no kernels'}); "
                       f"running them needs a CUDA GPU (CPU mode)", report)
    plan = layouts(kernels, binding)
    key = _key(kernels, binding, cpp, functions, flags, plan[0])
    if key in _modules:
        _by_args[args_key] = _modules[key]
        return _modules[key]
    require_tools(ninja=True)
    module = _load_planned(name, plan, kernels, binding, cpp, functions, flags, verbose, first_key=key)
    module.kernels_source = kernels
    _modules[key] = _by_args[args_key] = module
    return module


def _key(kernels, binding, cpp, functions, flags, layout: str) -> str:
    return _hash(kernels, binding, cpp, list(functions), tuple(flags), NVCC_FLAGS, device_arch(),
                 *(() if layout == "inline" else (layout,)), *((HOST_PROLOGUE,) if layout == "host" else ()))


def layouts(kernels: str, binding: str) -> list:
    """The layouts to try, best first: each later one is built only when the one before fails (see the module's
    docstring). ``host`` needs a binding whose launches can be rewritten (:func:`host_binding`)."""
    chosen = build_layout()
    if chosen == "inline" or not splittable(kernels, binding):
        return ["inline"]
    if chosen == "host" and host_binding(kernels, binding) is not None:
        return ["host", "split", "inline"]
    return ["split", "inline"]


def _load_planned(name, plan, kernels, binding, cpp, functions, flags, verbose, first_key: str | None = None):
    """Build the first layout of ``plan`` that builds. Any failure of ``host`` (the binding moved out of the .cu
    file: a launch it could not carry over, a type or macro of the kernels that the binding used, a kernel symbol
    that did not link) hands over to ``split``; ``split`` hands over to ``inline`` only when nvcc's device pass alone
    failed (it saw no torch header). The error shown is the last layout's, so a learner's message is the one the
    plain layouts give."""
    for i, layout in enumerate(plan):
        last = i == len(plan) - 1
        try:
            key = first_key if i == 0 and first_key else _key(kernels, binding, cpp, functions, flags, layout)
            return _load(name, key, kernels, binding, cpp, functions, flags, verbose, layout)
        except (CudaCompileError, ImportError) as exc:
            if last:
                raise
            if layout == "host":
                continue
            if layout == "split" and isinstance(exc, CudaCompileError) and _device_pass_failed(exc.raw):
                continue
            raise


def prebuild(name: str, kernels: str, binding: str, cpp: str, functions, flags=()) -> None:
    """The grader's first worker for a CUDA submission sees no GPU: compile the extension as the GPU worker will
    (same layouts, keys, folders and flags), so that worker's build() finds it up to date and only loads it. A
    failure here is left for the GPU worker to meet and report; compiling is all this is for."""
    try:
        require_tools(ninja=True)
        _load_planned(name, layouts(kernels, binding), kernels, binding, cpp, list(functions), flags, False)
    except Exception:  # noqa: BLE001  (a compile error, or an import that needs the GPU: the GPU worker decides)
        pass


def build_layout() -> str:
    """``host`` (default), ``split`` or ``inline``, from $GPUCOURSE_CUDA_BUILD."""
    value = (os.environ.get(BUILD_ENV) or "host").strip().lower()
    if value not in LAYOUTS:
        raise ValueError(f"{BUILD_ENV}={value!r}: choose one of {', '.join(LAYOUTS)}")
    return value


def splittable(kernels: str, binding: str) -> bool:
    """Whether the device pass can be given the kernels alone: no template in them (the binding may instantiate
    it) and no device code in the binding."""
    return not _NEEDS_BOTH_PASSES.search(kernels) and not _DEVICE_CODE.search(binding)


def cuda_source(kernels: str, binding: str, split: bool, path: str = "cuda.cu") -> str:
    """The .cu file at ``path``: torch's headers, the kernels, the binding. The inline layout gets load_inline's
    own first three lines (torch/types.h, cuda.h, cuda_runtime.h) from load_inline itself. ``split``: the headers
    and the binding are host code only (``#ifndef __CUDA_ARCH__``), so nvcc's device pass parses the kernels alone;
    ``#line`` keeps every line where the inline layout has it (the kernels from line 8), so messages, -lineinfo and
    sanitizer reports name the same lines, and the device pass calls the file plain ``cuda.cu`` where the host pass
    uses ``path``, so a failure of the device pass alone is told apart (:func:`_device_pass_failed`)."""
    if not split:
        return BINDING_HEADERS + kernels + "\n" + binding
    binding_line = 8 + kernels.count("\n") + 1
    return ("#ifndef __CUDA_ARCH__\n#include <torch/types.h>\n#endif\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
            "#ifdef __CUDA_ARCH__  // the device pass compiles the kernels alone\n"
            "#define GPUCOURSE_CUDA_FILE \"cuda.cu\"\n#else\n" + BINDING_HEADERS +
            f"#define GPUCOURSE_CUDA_FILE {json.dumps(path)}\n#endif\n#line 8 GPUCOURSE_CUDA_FILE\n" + kernels +
            f"\n#ifndef __CUDA_ARCH__\n#line {binding_line}\n" + binding + "\n#endif\n")


_DEVICE_PASS_DIAGNOSTIC = re.compile(r"(?:^|[\s\"'])cuda\.cu\(\d+\): (?:error|catastrophic)", re.M)


def _device_pass_failed(output: str) -> bool:
    """A split build's compiler output blames the device pass (its diagnostics name plain ``cuda.cu``): the host
    pass, which sees everything the inline layout's does, got through."""
    return bool(_DEVICE_PASS_DIAGNOSTIC.search(output))


def _load(name, key, kernels, binding, cpp, functions, flags, verbose, layout: str):
    import torch.utils.cpp_extension as ext

    bound = _load_bound(name, key, kernels, binding, cpp, functions, flags, verbose, layout)
    if bound is not None:  # the grader's binding object linked in place of main.cpp's module (see the end)
        return bound
    full = f"{name}_{key}"
    build_dir = os.path.join(cache_dir(), full)
    os.makedirs(build_dir, exist_ok=True)
    cu_path = os.path.join(os.path.abspath(build_dir), "cuda.cu")
    if layout == "host":
        source = kernels_source(kernels, cu_path)
    else:
        source = cuda_source(kernels, binding, layout == "split", cu_path)
    kwargs = dict(name=full, cuda_sources=[source], functions=functions,
                  extra_cuda_cflags=[*NVCC_FLAGS, *flags], extra_cflags=list(MAIN_CFLAGS),
                  build_directory=build_dir, verbose=verbose)
    if layout in ("host", "split"):
        pch = shared_header()
        if pch:
            kwargs["extra_cflags"] += ["-include", pch, "-Winvalid-pch"]
        main = "#include <torch/extension.h>\n"
        if layout == "host":
            main += BINDING_HEADERS + host_binding(kernels, binding) + "\n"
        kwargs.update(cpp_sources=[main + cpp], no_implicit_headers=True)
    else:
        kwargs["cpp_sources"] = [cpp]
    try:
        if layout != "inline" and "no_implicit_headers" not in _load_inline_parameters():
            module = _load_files(ext, **kwargs)
        else:
            module = ext.load_inline(**kwargs)
    except RuntimeError as exc:  # ninja's output holds the compiler's diagnostics
        if "Error building extension" in str(exc):
            err = CudaCompileError(f"building {name} failed:\n" + _compiler_message(str(exc)))
            err.raw = str(exc)
            raise err from None
        raise
    module.build_layout = layout + ("+pch" if kwargs["extra_cflags"] != list(MAIN_CFLAGS) else "")
    return module


# ---------------------------------------------------------------------------------------------------------------------
# The host layout: the binding compiled in main.cpp (with the precompiled header), the .cu file the kernels alone.

# What main.cpp needs to launch the kernels without nvcc: CUDA's runtime API and the vector/half types, the kernels'
# host-side symbols declared as plain functions (nvcc defines each kernel's host stub, an ordinary function of the
# kernel's name and parameters, in the .cu file's object), and a launch through cudaLaunchKernel that converts each
# argument to its parameter's type as a call would, as nvcc's <<<>>> does.
HOST_PROLOGUE = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#ifndef __grid_constant__
#define __grid_constant__
#endif
namespace gpucourse_host {
static int skip_launches = 0;  // set through gpucourse_skip_launches() (cuda_build.launches_skipped): launch nothing
inline cudaStream_t stream(cudaStream_t s) { return s; }
inline cudaStream_t stream(int s) { return reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(s)); }
template <typename K, typename T, std::size_t... I>
inline void launch_tuple(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t st, T& values,
                         std::index_sequence<I...>) {
  void* args[] = {const_cast<void*>(static_cast<const void*>(&std::get<I>(values)))..., nullptr};
  cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, smem, st);
}
template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A&&... a) {
  static_assert(sizeof...(P) == sizeof...(A), "a kernel launched with the wrong number of arguments");
  std::tuple<typename std::decay<P>::type...> values(std::forward<A>(a)...);
  if (skip_launches) return;
  launch_tuple(kernel, grid, block, smem, st, values, std::index_sequence_for<P...>{});
}
}  // namespace gpucourse_host
extern "C" __attribute__((visibility("default"))) int* gpucourse_skip_launches() {
  return &gpucourse_host::skip_launches;
}
"""
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_NOT_HOSTABLE = re.compile(r"\bnamespace\b|\bstatic\b[^;{}]*__global__|__global__[^;{}(]*\bstatic\b|extern\s*\"C\"|"
                           r"\btemplate\b|#\s*if|\\\n")


def _matching(text: str, start: int) -> int | None:
    """Index of the ``)`` that closes the ``(`` at ``start`` (string and char literals skipped); None if none."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _split_top(text: str) -> list:
    """``text`` split at commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    return parts + [cur]


def _rewrite_launches(binding: str, names) -> str | None:
    """Each ``kernel<<<grid, block[, smem[, stream]]>>>(args)`` of ``binding`` as a call of the launch helper;
    None when a launch is not of that shape or names no kernel of ``names``."""
    out, i = [], 0
    while True:
        j = binding.find("<<<", i)
        if j < 0:
            return "".join(out) + binding[i:]
        m = re.search(r"(\w+)\s*$", binding[i:j])
        k = binding.find(">>>", j + 3)
        if not m or m.group(1) not in names or k < 0:
            return None
        config = [c.strip() for c in _split_top(binding[j + 3:k])]
        p = k + 3
        while p < len(binding) and binding[p].isspace():
            p += 1
        q = _matching(binding, p) if binding[p:p + 1] == "(" else None
        if not 2 <= len(config) <= 4 or not all(config) or q is None:
            return None
        grid, block, smem, stream = (config + ["0", "0"])[:4]
        args = binding[p + 1:q].strip()
        out.append(binding[i:i + m.start(1)] + f"::gpucourse_host::launch({m.group(1)}, {grid}, {block}, ({smem}), "
                   f"::gpucourse_host::stream({stream}){', ' + args if args else ''})")
        i = q + 1


def host_binding(kernels: str, binding: str) -> str | None:
    """main.cpp's part for the host layout: the prologue, the kernels' ``#define`` lines, their host symbols
    declared, and ``binding`` with its launches rewritten; None where the kernels or the binding do not fit (a
    template, a namespace, a static or extern "C" kernel, a conditional block, a launch not of the plain shape)."""
    code = _COMMENTS.sub(" ", kernels)
    if _NOT_HOSTABLE.search(code) or "<<<" not in binding:
        return None
    defines = [line.strip() for line in code.splitlines() if line.strip().startswith("#define")]
    code = re.sub(r"__launch_bounds__\s*\([^()]*\)", " ", code)
    decls = {}
    for m in re.finditer(r"__global__\s+void\s+(\w+)\s*\(", code):
        close = _matching(code, m.end() - 1)
        if close is None:
            return None
        decls.setdefault(m.group(1), f"void {m.group(1)}({' '.join(code[m.end():close].split())});")
    launches = _rewrite_launches(binding, decls) if decls else None
    if launches is None:
        return None
    return HOST_PROLOGUE + "\n".join(defines + list(decls.values())) + "\n" + launches


def kernels_source(kernels: str, path: str = "cuda.cu") -> str:
    """The host layout's .cu file: the kernels alone, from line 8 as in the other layouts."""
    return ("#include <cuda.h>\n#include <cuda_runtime.h>\n\n\n\n\n\n" + f"#line 8 {json.dumps(path)}\n" + kernels
            + "\n")


def _load_inline_parameters() -> frozenset:
    import torch.utils.cpp_extension as ext

    try:
        params = inspect.signature(ext.load_inline).parameters
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):  # a wrapper taking **kwargs
        return frozenset(params) | {"no_implicit_headers"}
    return frozenset(params)


def _load_files(ext, name, cpp_sources, cuda_sources, functions, build_directory, no_implicit_headers=True,
                **kwargs):
    """A torch whose load_inline has no ``no_implicit_headers``: the same two files, built with ``load``."""
    defs = "".join(f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");\n' for f in functions)
    files = {"main.cpp": "\n".join(cpp_sources) + f"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{defs}}}\n",
             "cuda.cu": "\n".join(cuda_sources)}
    for fname, text in files.items():
        path = os.path.join(build_directory, fname)
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)
    return ext.load(name=name, sources=[os.path.join(build_directory, f) for f in files],
                    build_directory=build_directory, **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# The precompiled torch/extension.h shared by the grader's workers.

_recipe_cache: dict = {}


def torch_ninja_vars(extra_cflags=(), extra_cuda_cflags=()) -> dict:
    """The variables (cxx, cflags, nvcc, cuda_cflags...) of the build.ninja torch.utils.cpp_extension writes for an
    extension with a main.cpp and a cuda.cu and these extra flags: how torch would compile each file here."""
    import torch.utils.cpp_extension as ext

    write = ext._write_ninja_file_to_build_library
    with tempfile.TemporaryDirectory(prefix="gpucourse-ninja-") as d:
        args = dict(path=os.path.join(d, "build.ninja"), name="gpucourse_probe",
                    sources=[os.path.join(d, "main.cpp"), os.path.join(d, "cuda.cu")],
                    extra_cflags=list(extra_cflags), extra_cuda_cflags=list(extra_cuda_cflags), extra_sycl_cflags=[],
                    extra_ldflags=[], extra_include_paths=[], with_cuda=True, with_sycl=False, is_standalone=False)
        params = inspect.signature(write).parameters
        write(**{k: v for k, v in args.items() if k in params})
        with open(args["path"]) as f:
            return dict(re.findall(r"^(\w+) = ?(.*)$", f.read(), re.M))


@contextlib.contextmanager
def as_cuda_torch():
    """Within: torch's extension builder finds the CUDA toolkit (nvcc's) and an arch list (sm_90, the course's) even
    where torch has no CUDA, so it writes the commands a CUDA build of this torch would run (compile-only
    measurements and tests on a machine with nvcc but no GPU). Both are restored after."""
    import torch.utils.cpp_extension as ext

    saved = ext.CUDA_HOME, os.environ.get("TORCH_CUDA_ARCH_LIST")
    if ext.CUDA_HOME is None:
        ext.CUDA_HOME = cuda_home()
    if saved[1] is None:
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    try:
        yield
    finally:
        ext.CUDA_HOME = saved[0]
        if saved[1] is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)


def pch_recipe() -> dict | None:
    """How torch compiles an extension's main.cpp here (compiler and flags, read from the build.ninja that
    torch.utils.cpp_extension writes), without the extension's name; None where torch cannot say (no CUDA, an
    unexpected torch). The precompiled header is built with exactly these, so gcc accepts it for main.cpp."""
    if "recipe" in _recipe_cache:
        return _recipe_cache["recipe"]
    recipe = None
    try:
        import torch

        lines = torch_ninja_vars(MAIN_CFLAGS)
        if lines.get("cxx") and "cflags" in lines:
            flags = [t for t in shlex.split(lines["cflags"]) + shlex.split(lines.get("post_cflags", ""))
                     if not t.startswith("-DTORCH_EXTENSION_NAME=")]
            cxx = shlex.split(lines["cxx"])
            version = subprocess.run([*cxx[-1:], "--version"], capture_output=True, text=True, timeout=60).stdout
            recipe = {"cxx": cxx, "flags": flags, "compiler": version.splitlines()[:1], "torch": torch.__version__,
                      "torch_path": os.path.dirname(torch.__file__), "header": PCH_TEXT}
    except Exception:  # no CUDA torch, no compiler, a torch whose internals moved: no precompiled header
        recipe = None
    _recipe_cache["recipe"] = recipe
    return recipe


def compile_only_recipe(folder: str) -> dict | None:
    """A torch without CUDA (CPU mode): the recipe a CUDA build of this torch would use, for measuring and testing
    the host compiles on a machine with nvcc but no GPU (benchmarks/explore_cuda_binding.py, the tests). Such a
    torch ships c10/cuda's headers without the one its CMake generates; a copy is written under ``folder`` and put
    on the include path. Only host compiles: nothing built with it can run. Returns the recipe (not cached as
    :func:`pch_recipe`'s; install it with ``_recipe_cache["recipe"] = ...``), or None where even this fails."""
    if pch_recipe() is not None:
        return pch_recipe()
    if nvcc_path() is None or cuda_home() is None:
        return None
    os.makedirs(os.path.join(folder, "c10", "cuda", "impl"), exist_ok=True)
    with open(os.path.join(folder, "c10", "cuda", "impl", "cuda_cmake_macros.h"), "w") as f:
        f.write("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    try:
        _recipe_cache.pop("recipe", None)
        with as_cuda_torch():
            recipe = pch_recipe()
    finally:
        _recipe_cache.pop("recipe", None)
    if recipe is not None:
        recipe["flags"] += ["-isystem", os.path.abspath(folder)]
    return recipe


def _pch_dir(recipe: dict) -> str:
    return os.path.join(cache_dir(), "shared", "pch_" + _hash(json.dumps(recipe, sort_keys=True)))


def _pch_valid(folder: str, recipe: dict, header: str = PCH_HEADER) -> bool:
    try:
        with open(os.path.join(folder, "recipe.json")) as f:
            return json.load(f) == recipe and os.path.exists(os.path.join(folder, header + ".gch"))
    except (OSError, ValueError):
        return False


def _compile_in(tmp: str, cmd: list, what: str, verbose: bool) -> bool:
    """Run one compile of a shared artefact being built in the private folder ``tmp``; on failure ``tmp`` is removed
    (and, verbose, the compiler's last words printed) and False returned."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if verbose:
        print(f"{what} in {time.perf_counter() - t0:.1f} s: {shlex.join(cmd)}")
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        if verbose:
            print(proc.stderr[-3000:])
        return False
    return True


def _build_pch(recipe: dict, header: str, verbose: bool = False) -> str | None:
    """The folder (named after ``recipe``, whose ``header`` is the text) holding ``header`` and its .gch, compiled
    with the recipe's compiler and flags unless a valid one is there; None when the compiler fails."""
    folder = _pch_dir(recipe)
    if _pch_valid(folder, recipe, header):
        return folder
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="pch_tmp_", dir=os.path.dirname(folder))
    path = os.path.join(tmp, header)
    with open(path, "w") as f:
        f.write(recipe["header"])
    if not _compile_in(tmp, [*recipe["cxx"], "-x", "c++-header", path, "-o", path + ".gch", *recipe["flags"]],
                       f"precompiled {header}", verbose):
        return None
    with open(os.path.join(tmp, "recipe.json"), "w") as f:
        json.dump(recipe, f, sort_keys=True)
    # The folder's name is its recipe: moved into place whole, so a reader never sees half of one; a build by
    # another process that got there first is as good as this one.
    os.chmod(tmp, 0o755)
    try:
        os.rename(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder if _pch_valid(folder, recipe, header) else None


def shared_header() -> str | None:
    """The precompiled torch/extension.h to ``-include`` in main.cpp: from $GPUCOURSE_CUDA_SHARED (the grader's),
    else from this cache (after :func:`prepare_shared`), when it was built for this compiler, these flags and this
    torch; else None (main.cpp parses the header itself, as before)."""
    recipe = pch_recipe()
    if recipe is None:
        return None
    for folder in (os.environ.get(SHARED_ENV), _pch_dir(recipe)):
        if folder and _pch_valid(folder, recipe):
            return os.path.join(folder, PCH_HEADER)
    return None


_prepared: dict = {}


def prepare_shared(verbose: bool = False) -> str | None:
    """Build (once per compiler, flags and torch; kept in the cache) the precompiled torch/extension.h that every
    main.cpp of a split build includes, and return its folder; None where it cannot be built (CPU mode, no compiler,
    an unexpected torch: builds then parse the header themselves). The grader calls this before its workers start
    and binds the folder read-only into their sandboxes (:func:`worker_binds`, :func:`worker_env`): a worker reads
    it and cannot change it. A build takes a single core about half a minute (the .gch is some 800 MB)."""
    recipe = pch_recipe()
    if recipe is None:
        return None
    folder = _build_pch(recipe, PCH_HEADER, verbose)
    if folder is None:
        return None
    _prepared["folder"] = folder
    return folder


def worker_env() -> dict:
    """Variables a grading worker needs for CUDA builds: the shared folder that :func:`prepare_shared` prepared in
    this process, the binding object's folder that :func:`prepare_binding` prepared, and $GPUCOURSE_CUDA_BUILD where
    it is set."""
    env = {SHARED_ENV: _prepared["folder"]} if _prepared.get("folder") else {}
    if _prepared.get("binding"):
        env[BINDING_ENV] = _prepared["binding"]
    if os.environ.get(BUILD_ENV):
        env[BUILD_ENV] = os.environ[BUILD_ENV]
    return env


def worker_binds() -> list:
    """Folders to show a sandboxed worker read-only, at the same path: the ones :func:`prepare_shared` and
    :func:`prepare_binding` prepared (the precompiled headers, the binding object)."""
    return [_prepared[k] for k in ("folder", "binding", "host_pch") if _prepared.get(k)]



# ---------------------------------------------------------------------------------------------------------------------
# The binding object: the Python module's half of main.cpp, compiled once per exercise by the grader.
#
# main.cpp holds two things: the learner's binding (host layout) and the pybind11 module that load_inline generates
# from ``cpp`` and ``functions`` (PYBIND11_MODULE, one m.def per function). The second is the same for every
# submission of an exercise, and it is what needs all of torch/extension.h: gcc instantiates the templates that
# header's inline code uses at the end of every translation unit that includes it, precompiled or not (about 9 s
# of one core for an empty file here; benchmarks/results/cpu-explore-cuda-binding.json). So the grader compiles the
# module once (:func:`prepare_binding`) into a read-only folder, and a submission's build compiles only its own
# part, with the lighter torch/types.h (precompiled too), and links that object:
#   host layout:  host.cpp (binding + declarations + a stub) + cuda.cu (kernels) + module.o
#   split layout: cuda.cu (kernels + binding, the stub in its host part) + module.o
# Python imports an extension by calling PyInit_<its name>, and a build's name carries its hash; the object's own
# init function has a fixed name (PyInit_gpucourse_binding_<key>), and the stub, compiled with the submission,
# defines PyInit_<the build's name> as a call of it. Any failure of such a build falls back to the full main.cpp.

BINDING_MODULE = "gpucourse_binding"  # the object's module name: its init function is PyInit_<this>_<key>
BINDING_OBJECT = "module.o"
BOUND_FAILED = "gpucourse_binding_failed.txt"  # in a build folder: the build that links the object failed here
HOST_PCH_HEADER = "gpucourse_torch_types.h"
# What a host.cpp that links the binding object includes first: the binding's headers only (no pybind11).
HOST_PCH_TEXT = ("// gpucourse: precompiled once for every host.cpp that links a binding object\n" + BINDING_HEADERS +
                 "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n")


def _binding_args(cpp, functions) -> tuple:
    if not isinstance(cpp, str):
        raise TypeError(f"cpp must be the C++ declarations as one string, not {type(cpp).__name__}")
    functions = [functions] if isinstance(functions, str) else list(functions)
    bad = [f for f in functions if not (isinstance(f, str) and f.isidentifier())]
    if not functions or bad:
        raise ValueError(f"functions must be C++ function names (identifiers), got {bad or functions!r}")
    return cpp, functions


def module_source(cpp: str, functions, init: str) -> str:
    """module.cpp: what load_inline generates for ``cpp`` and ``functions`` (torch/extension.h, the declarations,
    PYBIND11_MODULE with one m.def per function, torch's error handling), its init function ``PyInit_<init>``."""
    defs = "".join(f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");\n' for f in functions)
    return f"#include <torch/extension.h>\n{cpp}\nPYBIND11_MODULE({init}, m) {{\n{defs}}}\n"


def init_stub(binding_key: str) -> str:
    """The lines a submission's build adds to its own C++: PyInit_<TORCH_EXTENSION_NAME> (the name torch's build
    gives it, which Python calls) as a call of the binding object's init function."""
    return (f'extern "C" void* PyInit_{BINDING_MODULE}_{binding_key}(void);\n'
            "#define GPUCOURSE_PYINIT_(name) PyInit_##name\n#define GPUCOURSE_PYINIT(name) GPUCOURSE_PYINIT_(name)\n"
            'extern "C" __attribute__((visibility("default"))) void* GPUCOURSE_PYINIT(TORCH_EXTENSION_NAME)(void) {\n'
            f"  return PyInit_{BINDING_MODULE}_{binding_key}();\n}}\n")


def binding_key(cpp: str, functions, recipe: dict) -> str:
    """The object's key: the declarations, the function names (in order), the recipe (compiler and its version,
    flags, torch's version and path, Python's include path) and the generated code itself."""
    cpp, functions = _binding_args(cpp, functions)
    return _hash(cpp, functions, json.dumps(recipe, sort_keys=True), module_source(cpp, functions, "K"),
                 init_stub("K"), HOST_PCH_TEXT)


def _binding_dir(key: str) -> str:
    return os.path.join(cache_dir(), "shared", f"binding_{key}")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _binding_record(folder: str, cpp: str, functions, recipe: dict) -> dict | None:
    """The folder's binding.json when it is the object for exactly these declarations and this recipe, and the
    object is the one it records; None otherwise (another exercise's, another torch's, a changed file)."""
    try:
        key = binding_key(cpp, functions, recipe)
        if os.path.basename(os.path.normpath(folder)) != f"binding_{key}":
            return None
        with open(os.path.join(folder, "binding.json")) as f:
            record = json.load(f)
        want = {"key": key, "cpp": cpp, "functions": list(functions), "recipe": recipe}
        if any(record.get(k) != v for k, v in want.items()):
            return None
        if _sha256(os.path.join(folder, BINDING_OBJECT)) != record.get("object_sha256"):
            return None
        return record
    except (OSError, ValueError, TypeError):
        return None


def prepare_binding(cpp: str, functions, verbose: bool = False) -> str | None:
    """Compile, once per (declarations, function names, compiler, flags, torch), the pybind11 module of an
    exercise whose learners declare ``cpp`` and bind ``functions``, and return its folder (kept in the cache); None
    where it cannot be built (CPU mode, no compiler, declarations that do not compile: builds then compile main.cpp
    themselves, as before). Also precompiles the binding's headers for the submissions' host.cpp. The grader calls
    this before its workers start, after :func:`prepare_shared`, and binds the folders read-only into their
    sandboxes (:func:`worker_binds`, :func:`worker_env`). Raises ValueError/TypeError for malformed arguments."""
    cpp, functions = _binding_args(cpp, functions)
    for k in ("binding", "host_pch"):
        _prepared.pop(k, None)
    recipe = pch_recipe()
    if recipe is None:
        return None
    host_pch = _build_pch(dict(recipe, header=HOST_PCH_TEXT), HOST_PCH_HEADER, verbose)
    key = binding_key(cpp, functions, recipe)
    folder = _binding_dir(key)
    if _binding_record(folder, cpp, functions, recipe) is None:
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="binding_tmp_", dir=os.path.dirname(folder))
        src, obj = os.path.join(tmp, "module.cpp"), os.path.join(tmp, BINDING_OBJECT)
        with open(src, "w") as f:
            f.write(module_source(cpp, functions, f"{BINDING_MODULE}_{key}"))
        pch = shared_header()
        if not _compile_in(tmp, [*recipe["cxx"], "-c", src, "-o", obj, *recipe["flags"],
                                 *(["-include", pch] if pch else [])], "compiled the binding object", verbose):
            return None
        with open(os.path.join(tmp, "binding.json"), "w") as f:
            json.dump({"key": key, "cpp": cpp, "functions": functions, "recipe": recipe,
                       "object_sha256": _sha256(obj), "host_pch": host_pch}, f, sort_keys=True)
        for name in os.listdir(tmp):
            os.chmod(os.path.join(tmp, name), 0o444)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, folder)  # whole, as the precompiled header's folder
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        if _binding_record(folder, cpp, functions, recipe) is None:
            return None
    _prepared["binding"] = folder
    if host_pch:
        _prepared["host_pch"] = host_pch
    return folder


def binding_object(cpp: str, functions) -> dict | None:
    """The binding object a build of these declarations links instead of compiling main.cpp's module, or None.
    Only the grader's ($GPUCOURSE_CUDA_BINDING) or one :func:`prepare_binding` made in this process, and only when
    it was compiled for exactly ``cpp``, ``functions`` and this recipe (:func:`_binding_record`): a notebook's build
    never depends on one. ``{"folder", "object", "key", "host_header"}``; host_header is None when the precompiled
    torch/types.h is missing or was built for another recipe (host.cpp then parses the headers itself)."""
    folder = os.environ.get(BINDING_ENV) or _prepared.get("binding")
    if not folder:
        return None
    recipe = pch_recipe()
    if recipe is None:
        return None
    try:
        cpp, functions = _binding_args(cpp, functions)
    except (TypeError, ValueError):
        return None
    record = _binding_record(folder, cpp, functions, recipe)
    if record is None:
        return None
    host_pch = record.get("host_pch")
    valid = isinstance(host_pch, str) and _pch_valid(host_pch, dict(recipe, header=HOST_PCH_TEXT), HOST_PCH_HEADER)
    return {"folder": folder, "object": os.path.join(folder, BINDING_OBJECT), "key": record["key"],
            "host_header": os.path.join(host_pch, HOST_PCH_HEADER) if valid else None}


def bound_sources(layout: str, kernels: str, binding: str, cpp: str, binding_key_: str, cu_path: str) -> dict:
    """The files of a build that links the binding object: ``host``: host.cpp (the binding with its launches
    rewritten, then ``cpp`` as load_inline's main.cpp has it after the binding, so a definition that disagrees with
    its declaration fails here as it does there, then the init stub) and cuda.cu (the kernels); ``split``: cuda.cu
    alone, the stub in its host part."""
    stub = init_stub(binding_key_)
    if layout == "host":
        host = host_binding(kernels, binding)
        if host is None:
            raise ValueError("the host layout cannot carry this source")
        return {"host.cpp": BINDING_HEADERS + host + "\n" + cpp + "\n" + stub,
                "cuda.cu": kernels_source(kernels, cu_path)}
    if layout == "split":
        return {"cuda.cu": cuda_source(kernels, binding, True, cu_path) + "\n#ifndef __CUDA_ARCH__\n" + stub +
                "#endif\n"}
    raise ValueError(f"no build links the binding object in the {layout!r} layout")


def _load_bound(name, key, kernels, binding, cpp, functions, flags, verbose, layout: str):
    """The build that links the binding object, in a folder of its own; None where there is no valid object, or
    this build failed (here or, recorded in the folder, in the grader's prebuild worker): the caller then builds
    main.cpp. The learner sees only the full build's messages."""
    obj = binding_object(cpp, functions) if layout in ("host", "split") else None
    if obj is None:
        return None
    full = f"{name}_{_hash(key, obj['key'])}"
    build_dir = os.path.join(cache_dir(), full)
    failed = os.path.join(build_dir, BOUND_FAILED)
    if os.path.exists(failed):
        return None
    try:
        import torch.utils.cpp_extension as ext

        os.makedirs(build_dir, exist_ok=True)
        files = bound_sources(layout, kernels, binding, cpp, obj["key"],
                              os.path.join(os.path.abspath(build_dir), "cuda.cu"))
        for fname, text in files.items():
            path = os.path.join(build_dir, fname)
            if not os.path.exists(path) or open(path).read() != text:  # unchanged files keep ninja's up to date
                with open(path, "w") as f:
                    f.write(text)
        cflags = list(MAIN_CFLAGS)
        if obj["host_header"]:
            cflags += ["-include", obj["host_header"], "-Winvalid-pch"]
        module = ext.load(name=full, sources=[os.path.join(build_dir, f) for f in files], extra_cflags=cflags,
                          extra_cuda_cflags=[*NVCC_FLAGS, *flags], extra_ldflags=[obj["object"]],
                          build_directory=build_dir, verbose=verbose)
        if not all(callable(getattr(module, f, None)) for f in functions):
            raise ImportError(f"{full} lacks one of {functions}")
    except Exception as exc:  # noqa: BLE001  (a compile error, a link or import failure: the full build decides)
        try:
            with open(failed, "w") as f:
                f.write(f"{type(exc).__name__}: {exc}"[-20000:])
        except OSError:
            pass
        return None
    module.build_layout = layout + "+binding" + ("+pch" if obj["host_header"] else "")
    return module


# ---------------------------------------------------------------------------------------------------------------------
# Skipped launches: what a call leaves when its kernels do nothing (the checker's "not computed by your kernels").

SKIP_SYMBOL = "gpucourse_skip_launches"  # exported by every host-layout build: the address of its switch


def _switch(module):
    """The launch switch (a ctypes int) of a built module, or None (split and inline layouts launch with <<<>>>,
    which has no switch, and a module that is not a loaded file has none either)."""
    import ctypes

    path = getattr(module, "__file__", None)
    if not path or not os.path.exists(path):
        return None
    try:  # the library is loaded already: RTLD_NOLOAD hands back its handle, never a second copy
        lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LOCAL", 0))
        fn = getattr(lib, SKIP_SYMBOL)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.POINTER(ctypes.c_int)
    fn.argtypes = []
    return fn().contents


@contextlib.contextmanager
def launches_skipped(modules=None):
    """Inside the block, every kernel launch of ``modules`` (default: every module :func:`build` loaded in this
    process) is skipped: the call returns what a launch that did nothing would leave, as the checker's Triton
    ``launches.skipping`` does. Yields whether every one of them has the switch (host layout only); where one does
    not, its launches run, so the checker must not read the output as a skipped call's."""
    mods = list({id(m): m for m in (_modules.values() if modules is None else modules)}.values())
    switches = [_switch(m) for m in mods]
    found = [s for s in switches if s is not None]
    old = [s.value for s in found]
    for s in found:
        s.value = 1
    try:
        yield bool(mods) and len(found) == len(mods)
    finally:
        for s, v in zip(found, old):
            s.value = v
