"""What the learner's code launched: Triton kernels, CUDA kernels, and the torch (aten) ops it called.

Triton kernels are launched as ``kernel[grid](...)``, which calls ``run`` on the kernel object: ``JITFunction.run``
when compiling for a GPU, ``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``. Both names exist from Triton 3.0
through 3.9 (checked in 3.6 and 3.9); :func:`install` wraps whichever exist, once, and counts launches by kernel name.
Autotuned and heuristics-wrapped kernels end in the same ``run``. Aten ops are recorded with a TorchDispatchMode, so
"the learner called torch.add in an exercise about writing an add kernel" becomes a flag for a human to look at.
CUDA C++ kernels (kind "cuda") are counted with the torch profiler, on a GPU only.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import importlib

_counts: collections.Counter = collections.Counter()
_installed = False
_TARGETS = (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter", "InterpretedFunction"))


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", None)
    return getattr(fn, "__name__", None) or getattr(kernel, "__name__", None) or type(kernel).__name__


def _wrap(orig):
    @functools.wraps(orig)
    def run(self, *args, **kwargs):
        if not kwargs.get("warmup", False):
            _counts[_kernel_name(self)] += 1
        return orig(self, *args, **kwargs)

    run.__gpucourse_counter__ = True
    return run


def install() -> bool:
    """Hook Triton's launch path (idempotent). Returns False when Triton is not installed."""
    global _installed
    if _installed:
        return True
    found = False
    for module_name, cls_name in _TARGETS:
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError):
            continue
        run = getattr(cls, "run", None)  # defined on the class itself in 3.6 and 3.9; inherited works too
        if run is not None and not getattr(run, "__gpucourse_counter__", False):
            cls.run = _wrap(run)
        found = True
    _installed = found
    return found


@contextlib.contextmanager
def counting_triton():
    """Yields a Counter (kernel name -> launches) filled with the Triton launches made inside the block."""
    install()
    before = collections.Counter(_counts)
    result: collections.Counter = collections.Counter()
    try:
        yield result
    finally:
        result.update(_counts - before)


# GPU activity that is not a computing kernel launch: copies and memsets (a pointer table sent to the GPU), and
# torch's fill kernel (torch.zeros for an output, and the checker's own poisoning of torch.empty outputs).
NOT_COUNTED = ("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")
NOT_COUNTED_KERNELS = ("FillFunctor",)


def is_counted_kernel(name: str) -> bool:
    """Whether a profiler GPU event named ``name`` counts as a kernel launch of the learner's code."""
    return not name.startswith(NOT_COUNTED) and not any(k in name for k in NOT_COUNTED_KERNELS)


@contextlib.contextmanager
def counting_cuda():
    """Yields a Counter of CUDA kernels (by name) run inside the block, via the torch profiler (GPU only).

    Copies, memsets and fills are not counted (see :func:`is_counted_kernel`)."""
    result: collections.Counter = collections.Counter()
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        yield result
        torch.cuda.synchronize()
    for evt in prof.events():
        if str(getattr(evt, "device_type", "")).endswith("CUDA") and is_counted_kernel(evt.name):
            result[evt.name] += 1


def _dispatch_mode_class():
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # very old torch: no op recording, nothing to flag
        return None

    class _Recorder(TorchDispatchMode):
        def __init__(self, ops):
            super().__init__()
            self.ops = ops

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[str(func)] += 1  # e.g. "aten.add.Tensor"
            return func(*args, **(kwargs or {}))

    return _Recorder


@contextlib.contextmanager
def recording_ops():
    """Yields a Counter of aten ops (e.g. ``aten.add.Tensor``) called inside the block."""
    ops: collections.Counter = collections.Counter()
    cls = _dispatch_mode_class()
    if cls is None:
        yield ops
        return
    with cls(ops):
        yield ops


def reference_calls(ops, prefixes) -> list:
    """The recorded ops that start with one of ``prefixes`` (an exercise's ``reference_ops``)."""
    return sorted(op for op in ops if any(op == p or op.startswith(p + ".") for p in prefixes))
