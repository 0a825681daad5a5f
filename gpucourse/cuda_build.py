"""Build CUDA C++ for the course: ``build`` (load_inline with course defaults) and ``compile_check`` (nvcc only).

A CUDA source in this course comes in two strings:

* ``kernels``: the ``__global__`` functions and their device helpers, plain CUDA C++ with no torch header, so that
  ``nvcc`` alone can compile it on a machine without a GPU or a CUDA build of torch (CPU mode);
* ``binding``: a small host function that takes ``torch::Tensor`` arguments, launches the kernels on torch's current
  stream and checks the launch. ``cpp`` declares the bound functions for ``load_inline``'s generated Python module.

This module gathers the names of the ``gpucourse.cuda`` modules that do the work (one job each: tools, inspection,
sources, launch_rewrite, build, cache). Setting one of its names (a test's monkeypatch, a benchmark's flags) sets it
in the module that defines it too, where the code that uses it looks it up.
"""
from __future__ import annotations

import sys
import types

from . import device
from .cuda import build as _build_mod, cache as _cache, inspection as _inspection, launch_rewrite as _launch_rewrite
from .cuda import sources as _sources, tools as _tools
from .cuda.build import PREBUILD_ENV, NeedsGPU, _key, _load, build, forget_loaded, prebuild
from .cuda.cache import (BINDING_ENV, BINDING_MODULE, BINDING_OBJECT, BOUND_FAILED, HOST_PCH_HEADER, HOST_PCH_TEXT,
                         PCH_HEADER, PCH_TEXT, SHARED_ENV, _build_pch, _prepared, _recipe_cache, _sha256,
                         as_cuda_torch, binding_key, binding_object, bound_sources, compile_only_recipe, init_stub,
                         module_source, pch_recipe, prepare_binding, prepare_shared, shared_header, torch_ninja_vars,
                         worker_binds, worker_env)
from .cuda.inspection import CompileReport, KernelResources, _reports, compile_check, parse_ptxas, sass, short_name
from .cuda.launch_rewrite import HOST_PROLOGUE, host_binding
from .cuda.sources import (BINDING_HEADERS, BUILD_ENV, LAYOUTS, _device_pass_failed, build_layout, cuda_source,
                           kernels_source, layouts, splittable)
from .cuda.tools import (ARCH_ENV, DEFAULT_ARCH, MAIN_CFLAGS, NVCC_FLAGS, CudaCompileError, ToolMissing, _hash,
                         cache_dir, cuda_home, device_arch, nvcc_path, require_tools, tool)

__all__ = [
    "ARCH_ENV", "BINDING_ENV", "BINDING_HEADERS", "BINDING_MODULE", "BINDING_OBJECT", "BOUND_FAILED", "BUILD_ENV",
    "DEFAULT_ARCH", "HOST_PCH_HEADER", "HOST_PCH_TEXT", "HOST_PROLOGUE", "LAYOUTS", "MAIN_CFLAGS", "NVCC_FLAGS",
    "PCH_HEADER", "PCH_TEXT", "PREBUILD_ENV", "SHARED_ENV", "CompileReport", "CudaCompileError", "KernelResources",
    "NeedsGPU", "ToolMissing", "as_cuda_torch", "binding_key", "binding_object", "bound_sources", "build",
    "build_layout", "cache_dir", "compile_check", "compile_only_recipe", "cuda_home", "cuda_source", "device_arch",
    "forget_loaded", "host_binding", "init_stub", "kernels_source", "layouts", "module_source", "nvcc_path",
    "parse_ptxas", "pch_recipe", "prebuild", "prepare_binding", "prepare_shared", "require_tools", "sass",
    "shared_header", "short_name", "splittable", "tool", "torch_ninja_vars", "worker_binds", "worker_env",
]
__all__ += [  # the parts' internals that tests, benchmarks and the grader's pycache reach through this module
    "device", "_build_pch", "_device_pass_failed", "_hash", "_key", "_load", "_prepared", "_recipe_cache", "_reports",
    "_sha256",
]
_PARTS = (_tools, _inspection, _sources, _launch_rewrite, _build_mod, _cache)


class _Facade(types.ModuleType):
    """This module's type: setting a name it gathered sets it in every part that defines it, too."""

    def __setattr__(self, name: str, value) -> None:
        if name in vars(self):
            for part in _PARTS:
                if name in vars(part):
                    setattr(part, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade
