"""``build``: compile a CUDA source (kernels + binding) with torch's load_inline and course defaults, and load it.

The build folder is named after a hash of the sources, flags and arch, so an unchanged cell loads in well under a
second and an edited one rebuilds only itself. The layouts are tried best first (``sources``). In CPU mode nothing can
load (a CPU-only torch has no CUDA runtime), so ``build`` compile-checks the kernels with nvcc and raises
:class:`NeedsGPU` with the compiler's report; compile errors are :class:`CudaCompileError` with the compiler's words.
"""
from __future__ import annotations

import inspect
import os

from .. import device
from . import cache, inspection, launch_rewrite, sources, tools
from .tools import CudaCompileError

# Set by the grader in the first of a CUDA submission's two workers, which sees no GPU: its build() compiles for real
# (for tools.ARCH_ENV's arch, not just the nvcc check of CPU mode) into the folder the GPU worker then finds up to date.
PREBUILD_ENV = "GPUCOURSE_CUDA_PREBUILD"


class NeedsGPU(RuntimeError):
    """CPU mode: the source compiled (``.report``) but running it needs a CUDA GPU."""

    __module__ = "gpucourse.cuda_build"  # its public path, as tools' errors

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


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
    if not device.on_gpu() and os.environ.get(PREBUILD_ENV) == "1" and os.environ.get(tools.ARCH_ENV):
        prebuild(name, kernels, binding, cpp, functions, flags)  # the GPU worker reports; no nvcc check here
        raise NeedsGPU(f"{name}: compiled for {tools.device_arch()} for the grader's GPU worker", None)
    if not device.on_gpu():
        report = inspection.compile_check(kernels, flags=flags)
        raise NeedsGPU(f"{name}: the CUDA kernels compile ({', '.join(report.kernels) or 'no kernels'}); "
                       f"running them needs a CUDA GPU (CPU mode)", report)
    plan = sources.layouts(kernels, binding)
    key = _key(kernels, binding, cpp, functions, flags, plan[0])
    if key in _modules:
        _by_args[args_key] = _modules[key]
        return _modules[key]
    tools.require_tools(ninja=True)
    module = _load_planned(name, plan, kernels, binding, cpp, functions, flags, verbose, first_key=key)
    module.kernels_source = kernels
    _modules[key] = _by_args[args_key] = module
    return module


def _key(kernels, binding, cpp, functions, flags, layout: str) -> str:
    return tools._hash(kernels, binding, cpp, list(functions), tuple(flags), tools.NVCC_FLAGS, tools.device_arch(),
                       *(() if layout == "inline" else (layout,)),
                       *((launch_rewrite.HOST_PROLOGUE,) if layout == "host" else ()))


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
            if layout == "split" and isinstance(exc, CudaCompileError) and sources._device_pass_failed(exc.raw):
                continue
            raise


def prebuild(name: str, kernels: str, binding: str, cpp: str, functions, flags=()) -> None:
    """The grader's first worker for a CUDA submission sees no GPU: compile the extension as the GPU worker will
    (same layouts, keys, folders and flags), so that worker's build() finds it up to date and only loads it. A
    failure here is left for the GPU worker to meet and report; compiling is all this is for."""
    try:
        tools.require_tools(ninja=True)
        _load_planned(name, sources.layouts(kernels, binding), kernels, binding, cpp, list(functions), flags, False)
    except Exception:  # noqa: BLE001  (a compile error, or an import that needs the GPU: the GPU worker decides)
        pass


def _load(name, key, kernels, binding, cpp, functions, flags, verbose, layout: str):
    import torch.utils.cpp_extension as ext

    bound = cache._load_bound(name, key, kernels, binding, cpp, functions, flags, verbose, layout)
    if bound is not None:  # the grader's binding object linked in place of main.cpp's module (cache.py)
        return bound
    full = f"{name}_{key}"
    build_dir = os.path.join(tools.cache_dir(), full)
    os.makedirs(build_dir, exist_ok=True)
    cu_path = os.path.join(os.path.abspath(build_dir), "cuda.cu")
    if layout == "host":
        source = sources.kernels_source(kernels, cu_path)
    else:
        source = sources.cuda_source(kernels, binding, layout == "split", cu_path)
    kwargs = dict(name=full, cuda_sources=[source], functions=functions,
                  extra_cuda_cflags=[*tools.NVCC_FLAGS, *flags], extra_cflags=list(tools.MAIN_CFLAGS),
                  build_directory=build_dir, verbose=verbose)
    if layout in ("host", "split"):
        pch = cache.shared_header()
        if pch:
            kwargs["extra_cflags"] += ["-include", pch, "-Winvalid-pch"]
        main = "#include <torch/extension.h>\n"
        if layout == "host":
            main += sources.BINDING_HEADERS + launch_rewrite.host_binding(kernels, binding) + "\n"
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
            err = CudaCompileError(f"building {name} failed:\n" + inspection._compiler_message(str(exc)))
            err.raw = str(exc)
            raise err from None
        raise
    module.build_layout = layout + ("+pch" if kwargs["extra_cflags"] != list(tools.MAIN_CFLAGS) else "")
    return module


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
