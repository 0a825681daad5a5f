"""The three layouts of a CUDA build and the .cu file each compiles.

Both translation units parse torch's headers, and that parsing is nearly all of a cold build. So the binding moves
out of nvcc's way where it can:

* ``host`` (default): the binding compiles in main.cpp with gcc (its launches rewritten, see ``launch_rewrite``);
  the .cu file holds the kernels alone;
* ``split``: one .cu file, torch's headers and the binding under ``#ifndef __CUDA_ARCH__``, so nvcc's device pass
  sees only the (torch-free) kernels;
* ``inline``: one ``load_inline``, torch's headers in both of nvcc's passes.

Each layout falls back to the next when it fails (``build._load_planned``), so no layout turns a source that
compiles one way into one that does not. $GPUCOURSE_CUDA_BUILD picks the first to try.
"""
from __future__ import annotations

import json
import os
import re

from . import launch_rewrite

BUILD_ENV = "GPUCOURSE_CUDA_BUILD"  # "host" (default), "split" or "inline": the older layouts, kept to compare with
LAYOUTS = ("host", "split", "inline")
# Only what a binding needs: torch's tensor type, the current stream and the launch check. torch/extension.h (all of
# torch's headers) is left to the small generated C++ file that holds the Python bindings.
BINDING_HEADERS = ("#include <torch/types.h>\n#include <c10/cuda/CUDAStream.h>\n"
                   "#include <c10/cuda/CUDAException.h>\n#include <c10/cuda/CUDAGuard.h>\n")
# What makes the device pass need more than the kernels: a kernel template (instantiated where the binding launches
# it) or device code in the binding.
_NEEDS_BOTH_PASSES = re.compile(r"\btemplate\b")
_DEVICE_CODE = re.compile(r"__(global|device|constant|shared|managed)__")


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


def layouts(kernels: str, binding: str) -> list:
    """The layouts to try, best first: each later one is built only when the one before fails (see the module's
    docstring). ``host`` needs a binding whose launches can be rewritten (``launch_rewrite.host_binding``)."""
    chosen = build_layout()
    if chosen == "inline" or not splittable(kernels, binding):
        return ["inline"]
    if chosen == "host" and launch_rewrite.host_binding(kernels, binding) is not None:
        return ["host", "split", "inline"]
    return ["split", "inline"]


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


def kernels_source(kernels: str, path: str = "cuda.cu") -> str:
    """The host layout's .cu file: the kernels alone, from line 8 as in the other layouts."""
    return ("#include <cuda.h>\n#include <cuda_runtime.h>\n\n\n\n\n\n" + f"#line 8 {json.dumps(path)}\n" + kernels
            + "\n")
