"""What the learner's code launched: Triton kernels, CUDA kernels, and the torch (aten) ops it called.

Triton kernels are launched as ``kernel[grid](...)``, which calls ``run`` on the kernel object: ``JITFunction.run``
when compiling for a GPU, ``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``. Both names exist from Triton 3.0
through 3.9 (checked in 3.6 and 3.9); :func:`install` wraps whichever exist, once, and counts launches by kernel name.
Autotuned and heuristics-wrapped kernels end in the same ``run``. Kernels defined inside the course's package (its
lessons' own solutions) are counted apart: launching them is not writing a kernel. Aten ops are recorded with a
TorchDispatchMode (:class:`Watch`), which also follows the data: the exercise's inputs, everything copied or viewed
from them and every tensor a kernel launch was given are "derived", and a compute op on derived data (anything but
allocation, views, copies and fills: :data:`FREE_OPS`) is a use that fails a Triton or CUDA exercise ("the learner
added with torch and launched an empty kernel beside it"). The launch itself can be skipped (:func:`skipping`), for
the checker's "what would a launch that did nothing leave" call. CUDA C++ kernels (kind "cuda") are counted with the
torch profiler, on a GPU only.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import importlib

import os
import sys

from . import interpreter

_counts: collections.Counter = collections.Counter()
_course_counts: collections.Counter = collections.Counter()  # launches of kernels defined in the course's package
_installed = False
_state = {"skip": False, "depth": 0, "watch": None}  # skip launches; launches in progress; the Watch recording
_COURSE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # .../gpucourse/
_TARGETS = (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter", "InterpretedFunction"))


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", None)
    return getattr(fn, "__name__", None) or getattr(kernel, "__name__", None) or type(kernel).__name__


def is_course_kernel(kernel) -> bool:
    """Whether a Triton kernel's Python function was defined in a file of the course's package."""
    fn = getattr(kernel, "fn", None)
    while fn is not None and not hasattr(fn, "__code__") and hasattr(fn, "fn"):  # autotuner -> heuristics -> jit
        fn = fn.fn
    code = getattr(fn, "__code__", None)
    return bool(code) and os.path.abspath(code.co_filename).startswith(_COURSE_DIR)


def _wrap(orig):
    @functools.wraps(orig)
    def run(self, *args, **kwargs):
        outer = _state["depth"] == 0
        if not kwargs.get("warmup", False) and outer:
            (_course_counts if is_course_kernel(self) else _counts)[_kernel_name(self)] += 1
        if _state["skip"] and outer:
            return None
        _state["depth"] += 1
        start = interpreter.mark()
        try:
            result = orig(self, *args, **kwargs)
        finally:
            _state["depth"] -= 1
            watch = _state["watch"]
            if outer and watch is not None:  # what the kernel was given may now hold what it computed
                watch.derive(list(args) + list(kwargs.values()))
            # torch/NumPy in an interpreted kernel body (interpreter.py): a use, even where the error was swallowed
            body_uses = interpreter.violations_since(start) if outer else []
            if body_uses and watch is not None and watch.uses is not None:
                watch.uses.update(body_uses)
        if body_uses:  # the body caught the interpreter's error: the launch fails all the same
            raise interpreter.KernelBodyError(body_uses[0])
        return result

    run.__gpucourse_counter__ = True
    return run


def install() -> bool:
    """Hook Triton's launch path (idempotent). Returns False when Triton is not installed."""
    global _installed
    interpreter.install()  # CPU mode: kernel bodies held to Triton, bf16 computed as on a GPU (idempotent)
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
def counting_triton(course: collections.Counter | None = None):
    """Yields a Counter (kernel name -> launches) filled with the Triton launches made inside the block; launches of
    the course's own kernels go to ``course`` instead."""
    install()
    before, before_course = collections.Counter(_counts), collections.Counter(_course_counts)
    result: collections.Counter = collections.Counter()
    try:
        yield result
    finally:
        result.update(_counts - before)
        if course is not None:
            course.update(_course_counts - before_course)


@contextlib.contextmanager
def skipping():
    """Inside the block, Triton launches are counted but not run: what a launch that did nothing would leave."""
    install()
    old, _state["skip"] = _state["skip"], True
    try:
        yield
    finally:
        _state["skip"] = old


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


# Ops that compute nothing from the values of their inputs: allocation, views and metadata, copies (a layout or a
# dtype), fills. Any other op on the inputs or on data derived from them is a use of torch to compute the answer.
ALLOC_OPS = frozenset(f"aten.{n}" for n in (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor", "arange", "lift_fresh",
    "lift_fresh_copy", "randn", "rand", "randint", "randperm", "normal", "uniform_", "random_", "_pin_memory",
    "eye", "linspace"))
# Tensors made from the host's Python data (torch.tensor([...]) of pointers and lengths, an index range).
HOST_DATA = frozenset(("aten.lift_fresh", "aten.lift_fresh_copy", "aten.scalar_tensor", "aten.arange"))
UNINITIALISED = frozenset(f"aten.{n}" for n in ("empty", "empty_like", "empty_strided", "new_empty",
                                                "new_empty_strided"))
VIEW_OPS = frozenset(f"aten.{n}" for n in (
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute", "expand",
    "expand_as", "squeeze", "unsqueeze", "select", "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind",
    "unflatten", "flatten", "alias", "detach", "detach_", "view_as", "view_as_real", "view_as_complex", "diagonal",
    "movedim", "unfold", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous", "stride",
    "size", "dim", "numel", "is_same_size", "is_pinned", "record_stream", "set_", "resize_",
    "_has_compatible_shallow_copy_type",
    "is_coalesced", "_nested_tensor_size"))
# Copies move values without computing new ones: a layout (contiguous, a gather), a dtype, a constant fill.
COPY_OPS = frozenset(f"aten.{n}" for n in (
    "clone", "contiguous", "_to_copy", "to", "copy_", "_copy_from", "_copy_from_and_resize", "fill_", "zero_",
    "cat", "stack", "repeat", "flip", "roll", "index_select", "gather", "index", "take", "constant_pad_nd"))
FREE_OPS = ALLOC_OPS | VIEW_OPS | COPY_OPS


def op_name(func) -> str:
    """``aten.add`` for ``aten.add.Tensor``: the op without its overload."""
    return str(getattr(func, "overloadpacket", func))


def _tensors(tree) -> list:
    import torch

    try:
        from torch.utils._pytree import tree_leaves
        leaves = tree_leaves(tree)
    except Exception:  # noqa: BLE001
        leaves = list(tree) if isinstance(tree, (list, tuple)) else [tree]
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _where(t):
    """(device, start of storage) of a tensor's memory, or None (no memory: empty, meta, sparse...)."""
    import torch

    try:
        if t.layout != torch.strided or t.device.type == "meta":
            return None
        ptr = t.untyped_storage().data_ptr()
        return (str(t.device), ptr) if ptr else None
    except Exception:  # noqa: BLE001
        return None


_DIRS: dict = {}


def _launchers_op() -> bool:
    """Inside a Triton launch, whether the op being dispatched was called by Triton's own code (the interpreter
    copying arguments, the launcher) rather than by learner code that the launch calls back: a grid function, a
    launch hook. Read from the innermost caller outside torch and this file (issue 39: a grid lambda computing the
    answer with torch went unseen)."""
    if not _DIRS:
        import torch
        import triton

        _DIRS["torch"] = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        _DIRS["triton"] = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
        _DIRS["here"] = os.path.abspath(__file__)
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if name.startswith(_DIRS["torch"]) or name == _DIRS["here"]:
            frame = frame.f_back
            continue
        return name.startswith(_DIRS["triton"])
    return True


def _dispatch_mode_class():
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # very old torch: no op recording, nothing to flag
        return None

    class _Watch(TorchDispatchMode):
        """Records every aten op (name -> calls) and, with ``inputs``, the compute ops used on derived data."""

        def __init__(self, ops, inputs=(), uses=None, allowed=(), opaque=False):
            super().__init__()
            self.ops, self.uses, self.allowed, self.opaque = ops, uses, frozenset(allowed), opaque
            self.inputs = {w for w in map(_where, _tensors(list(inputs))) if w is not None}
            self.derived = set(self.inputs)

        def derive(self, values) -> None:
            self.derived.update(w for w in map(_where, _tensors(list(values))) if w is not None)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if _state["depth"] and _launchers_op():  # the launcher's own copies and allocations
                return func(*args, **kwargs)
            name = op_name(func)
            self.ops[str(func)] += 1  # e.g. "aten.add.Tensor"
            out = func(*args, **kwargs)
            if self.uses is None:
                return out
            given = [w for w in map(_where, _tensors([args, kwargs])) if w is not None]
            touches = [w for w in given if w in self.derived]
            outs = [w for w in map(_where, _tensors(out)) if w is not None]
            if name in ALLOC_OPS:
                if self.opaque and name not in HOST_DATA:  # a CUDA binding may fill it from the inputs unseen
                    self.derived.update(outs)
                else:
                    self.derived.difference_update(w for w in outs if w not in given)  # fresh memory
                if name in UNINITIALISED:  # whatever way it was asked for (empty_strided too): never old results
                    from .guards import poison_

                    for t in _tensors(out):
                        poison_(t)
            elif name in VIEW_OPS:
                pass  # shares its input's memory
            elif touches:
                if name == "aten._to_copy" or name == "aten.copy_" or name == "aten._copy_from":
                    # Derived data leaving the GPU for the host is data computed on elsewhere. The other way
                    # (a table a binding built in pinned host memory, copied to the GPU) moves nothing computed.
                    leaves = {w[0] for w in touches if w[0] != "cpu"} - {w[0] for w in outs}
                    if leaves:
                        self.uses[f"{name} (to another device)"] += 1
                elif name not in COPY_OPS:
                    on_input = any(w in self.inputs for w in touches)
                    if on_input or name not in self.allowed:
                        self.uses[name + (" on an input" if on_input and name in self.allowed else "")] += 1
                self.derived.update(outs)
            else:  # computed from fresh data only: a fresh result, even where it reuses freed derived memory
                self.derived.difference_update(w for w in outs if w not in given)
            return out

    return _Watch


@contextlib.contextmanager
def recording_ops(inputs=None, uses=None, allowed=(), opaque=False):
    """Yields a Counter of aten ops (e.g. ``aten.add.Tensor``) called inside the block. With ``inputs`` (tensors)
    and ``uses`` (a Counter), the compute ops used on the inputs or on what was derived from them (see the module's
    docstring) are counted into ``uses``; ``allowed`` ops are not counted on derived data (only on the inputs).
    ``opaque``: kernels are launched where this cannot see their arguments (a CUDA extension's binding), so every
    tensor allocated in the block counts as derived, but those made from the host's Python data."""
    ops: collections.Counter = collections.Counter()
    cls = _dispatch_mode_class()
    if cls is None:
        yield ops
        return
    watch = cls(ops, inputs or (), uses if inputs is not None else None, allowed, opaque)
    old, _state["watch"] = _state["watch"], (watch if inputs is not None else _state["watch"])
    try:
        with watch:
            yield ops
    finally:
        _state["watch"] = old


def reference_calls(ops, prefixes) -> list:
    """The recorded ops that start with one of ``prefixes`` (an exercise's ``reference_ops``)."""
    return sorted(op for op in ops if any(op == p or op.startswith(p + ".") for p in prefixes))
