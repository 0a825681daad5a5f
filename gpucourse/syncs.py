"""Find the places where Python code makes the CPU wait for the GPU (a *synchronization*), with their source lines.

A GPU runs the kernels the CPU queues for it, asynchronously: the CPU races ahead and the queue keeps the GPU busy.
Any operation whose *result the CPU needs now* drains the queue first: reading a value (``.item()``, ``.tolist()``,
``float(t)``, ``if t:``, ``print(t)``, ``f"{t:.3f}"``), copying to the host (``.cpu()``, ``.numpy()``), an output
whose size depends on the data (``nonzero``, ``x[mask]``, ``unique``, ``masked_select``), and a copy from
pageable host memory to the device (the CPU must hold the source still until the copy is done, unless the copy is
small enough for the driver to stage it; pinned memory with ``non_blocking=True`` avoids it at any size).

``detect()`` is a context manager that records each of these with the op and the learner's line::

    with gpucourse.syncs.detect() as log:
        train_one_epoch(...)
    print(log.report())          # "2 synchronizations: Tensor.item at train.py:14  losses.append(loss.item())"

How: a ``TorchFunctionMode`` sees every torch call made from Python, tensor methods included (``__bool__``,
``__format__``, ``__getitem__``...). On a GPU an op is counted when its tensor lives on the GPU; on a GPU it also
switches on ``torch.cuda.set_sync_debug_mode("warn")`` and records the synchronizations torch itself reports (syncs
inside library code). Explicit waits (``torch.cuda.synchronize()``, ``Stream.synchronize()``,
``Event.synchronize()``, ``torch.accelerator.synchronize()``, and the course's ``gpucourse.synchronize()``) are not
torch functions and torch's debug mode does not report them, so ``detect()`` wraps those while it is active (code that
saved a reference to one before entering is not seen). A wait inside another (``gpucourse.synchronize()`` calls
``torch.cuda.synchronize()`` on a GPU) is recorded once, at the outer call's line. In CPU mode there is no device to
wait for, so the detector *emulates* one: every tensor counts as a device tensor, and every ``.to(device)`` without
``non_blocking=True`` counts as a blocking copy. Code that passes in CPU mode therefore has none of the patterns
above; code that fails names the op and line that would stall a GPU. The emulation judges the learner's own calls
only: calls made inside torch's code (an optimizer's ``step()``, ``clip_grad_norm_``) are not counted in CPU mode,
because which of torch's internal tensors would live on the GPU cannot be known there (``Adam`` keeps its step count
on the CPU on purpose, so its ``.item()`` never waits for the GPU). On a GPU nothing is emulated: those calls are
judged by where their tensors really are, and torch's own debug mode reports syncs inside its C++ code. (A real sync
inside an optimizer, LBFGS's, or ``clip_grad_norm_(error_if_nonfinite=True)``, is therefore only found on a GPU.)
"""
from __future__ import annotations

import dataclasses
import linecache
import os
import sys
import warnings

import torch
from torch.overrides import TorchFunctionMode

from . import asyncqueue as _asyncqueue
from . import device as _device

_THIS = os.path.abspath(__file__)
_ASYNCQUEUE = os.path.abspath(_asyncqueue.__file__)
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))

# Tensor methods that hand a value (or the whole tensor) to Python: the CPU must wait for it.
READS = {
    "item": "reads a value on the host (.item())",
    "tolist": "copies the tensor to the host (.tolist())",
    "numpy": "copies the tensor to the host (.numpy())",
    "__bool__": "needs the value on the host (bool(tensor), e.g. `if tensor:` or `while tensor:`)",
    "__int__": "needs the value on the host (int(tensor))",
    "__float__": "needs the value on the host (float(tensor))",
    "__index__": "needs the value on the host (tensor used as an index or a range bound)",
    "__complex__": "needs the value on the host (complex(tensor))",
    "__repr__": "prints the tensor (print/repr copies it to the host)",
    "__format__": "formats the tensor (f-string/format copies it to the host)",
    "__array__": "converts the tensor to a NumPy array on the host",
    "cpu": "copies the tensor to the host (.cpu())",
}
# Ops whose output size depends on the data: the CPU must learn the size before it can allocate the output.
DATA_DEPENDENT = {
    "nonzero": "nonzero: the output size depends on the data",
    "argwhere": "argwhere: the output size depends on the data",
    "masked_select": "masked_select: the output size depends on the data",
    "unique": "unique: the output size depends on the data",
    "unique_consecutive": "unique_consecutive: the output size depends on the data",
    "bincount": "bincount: the output size depends on the data (its maximum)",
}


@dataclasses.dataclass
class Sync:
    """One synchronization: the op, why it waits, and where in the learner's code it happened."""

    op: str
    why: str
    filename: str
    lineno: int
    function: str
    line: str

    def where(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno} in {self.function}()"

    def __str__(self) -> str:
        return f"{self.op} at {self.where()}: {self.line.strip()}   <- {self.why}"


class SyncLog(list):
    """The synchronizations found, in order (a list of :class:`Sync`).

    ``ops_seen``: how many torch calls the detector saw in all (a body that switched torch's function hooks off,
    e.g. with ``torch._C.DisableTorchFunction()``, is invisible to it and shows up as too few)."""

    ops_seen: int = 0

    def report(self, limit: int = 10) -> str:
        if not self:
            return "no synchronizations"
        lines = [f"{len(self)} synchronization{'s' if len(self) != 1 else ''}:"]
        lines += [f"  {s}" for s in self[:limit]]
        if len(self) > limit:
            lines.append(f"  ... and {len(self) - limit} more")
        return "\n".join(lines)

    def grouped(self) -> list:
        """One line per (op, source line), with how many times it synchronized, in order of first occurrence."""
        seen = {}
        for s in self:
            key = (s.op, s.filename, s.lineno)
            seen.setdefault(key, [s, 0])[1] += 1
        return [f"{s}  (x{n})" if n > 1 else str(s) for s, n in seen.values()]

    def ops(self) -> list:
        return [s.op for s in self]


def _caller(skip_files=()) -> tuple:
    """(filename, lineno, function, line) of the innermost frame outside torch, this module, the course's device
    queue (asyncqueue.py: its waits are the caller's) and ``skip_files``."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if fn not in (_THIS, _ASYNCQUEUE) and not fn.startswith(_TORCH_DIR) and fn not in skip_files \
                and "<frozen" not in fn:
            line = linecache.getline(f.f_code.co_filename, f.f_lineno, f.f_globals)
            return f.f_code.co_filename, f.f_lineno, f.f_code.co_name, line
        f = f.f_back
    return "?", 0, "?", ""


# Torch's own library code whose calls CPU mode does not judge (see the module's docstring): optimizers and the
# nn utilities (clip_grad_norm_'s .to(device) of a tensor already there). Calls that pass through torch's public
# wrappers (torch.unique in functional.py, Tensor.__format__ in _tensor.py) are still the learner's.
_LIBRARY_DIRS = tuple(os.path.join(_TORCH_DIR, *d) + os.sep for d in (("optim",), ("nn", "utils")))


def _called_from_torch() -> bool:
    """Whether the torch call being classified was made inside torch's library code (an optimizer's ``step()``,
    ``clip_grad_norm_``) rather than by the learner's code: some frame between the call and the first frame outside
    torch lies in ``_LIBRARY_DIRS``."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if fn != _THIS:
            if fn.startswith(_LIBRARY_DIRS):
                return True
            if not fn.startswith(_TORCH_DIR + os.sep):
                return False
        f = f.f_back
    return False


def _name(func) -> str:
    return getattr(func, "__name__", None) or str(func)


def _on_device(t, emulate: bool) -> bool:
    return isinstance(t, torch.Tensor) and (emulate or t.device.type not in ("cpu", "meta"))


def _target_device(func_name: str, args, kwargs):
    """The device a ``.to(...)``/``.cuda()`` call copies to, or None when it does not name one."""
    if func_name == "cuda":
        return torch.device("cuda")
    for a in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(a, torch.device):
            return a
        if isinstance(a, str):
            return torch.device(a)
        if isinstance(a, int) and not isinstance(a, bool):
            return torch.device("cuda", a)
        if isinstance(a, torch.Tensor):
            return a.device
    return None


def _non_blocking(func_name: str, args, kwargs) -> bool:
    """The ``non_blocking`` argument of a ``.to(...)``/``.cuda(...)`` call (``args[0]`` is the tensor), read from
    its keyword or from its position in the overload that was called:
    ``cuda(device, non_blocking)``, ``to(dtype, non_blocking, copy)``, ``to(other_tensor, non_blocking, copy)``,
    ``to(device, dtype, non_blocking, copy)``."""
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    if func_name == "cuda" or (len(args) > 1 and isinstance(args[1], (torch.dtype, torch.Tensor))):
        position = 2
    else:
        position = 3
    return len(args) > position and bool(args[position])


def classify(func, args, kwargs, emulate: bool) -> str | None:
    """Why this torch call synchronizes, or None if it does not. ``emulate``: CPU mode, where every tensor is treated
    as a device tensor and every ``.to(device)`` as a host-device copy."""
    name = _name(func)
    self = args[0] if args else None
    if name in READS:
        return READS[name] if _on_device(self, emulate) else None
    if name in DATA_DEPENDENT:
        return DATA_DEPENDENT[name] if _on_device(self, emulate) else None
    if name == "where" and len(args) == 1 and not kwargs:
        return "where(condition) with one argument is nonzero: the output size depends on the data" \
            if _on_device(self, emulate) else None
    if name == "repeat_interleave" and len(args) > 1 and isinstance(args[1], torch.Tensor) \
            and kwargs.get("output_size") is None:
        return "repeat_interleave with tensor repeats: the output size depends on the data (pass output_size=)" \
            if _on_device(self, emulate) else None
    if name == "__getitem__" and len(args) > 1:
        idx = args[1] if isinstance(args[1], tuple) else (args[1],)
        if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.dim() > 0 for i in idx):
            return "boolean-mask indexing x[mask]: the output size depends on the data (use torch.where)" \
                if _on_device(self, emulate) else None
        return None
    if name in ("to", "cuda") and isinstance(self, torch.Tensor):
        dst = _target_device(name, args, kwargs)
        if dst is None:
            return None
        non_blocking = _non_blocking(name, args, kwargs)
        if emulate:
            return None if non_blocking else ("blocking copy between host and device (.to(device) without "
                                              "non_blocking=True; on a GPU the source must also be pinned)")
        src = self.device
        if src.type == dst.type:
            return None
        if dst.type == "cpu":
            return None if non_blocking else "copies the tensor to the host (.to('cpu'))"
        if src.type == "cpu":
            if not non_blocking:
                return "blocking host-to-device copy (.to(device) without non_blocking=True)"
            if not self.is_pinned():
                return ("host-to-device copy from pageable memory: with non_blocking=True a large one still waits "
                        "until it is done (a small one, which the driver stages, may not: lesson 02 measures where); "
                        "pin the source (x.pin_memory(), or DataLoader(pin_memory=True)) and no size waits")
    return None


class _Detector(TorchFunctionMode):
    def __init__(self, log: SyncLog, emulate: bool, skip_files: tuple):
        super().__init__()
        self.log, self.emulate, self.skip_files, self.inside = log, emulate, skip_files, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.log.ops_seen += 1
        try:
            why = None if self.emulate and _called_from_torch() else classify(func, args, kwargs, self.emulate)
        except Exception:  # classification must never break the learner's code
            why = None
        if why is not None:
            filename, lineno, function, line = _caller(self.skip_files)
            qual = getattr(func, "__qualname__", "") or ""
            owner = "Tensor" if qual.startswith(("Tensor", "_TensorBase")) else "torch"
            self.log.append(Sync(f"{owner}.{_name(func)}", why, filename, lineno, function, line))
            self.inside += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.inside -= 1
        return func(*args, **kwargs)


def _explicit_waits():
    """``(owner, attribute, label)`` for the explicit CPU-waits-for-GPU calls that exist in this torch, and the
    course's own ``gpucourse.synchronize()`` (which waits for the stand-in queue in CPU mode), under both of its
    names."""
    import gpucourse

    out = [(torch.cuda, "synchronize", "torch.cuda.synchronize"),
           (torch.cuda.Stream, "synchronize", "Stream.synchronize"),
           (torch.cuda.Event, "synchronize", "Event.synchronize")]
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "synchronize"):
        out.append((acc, "synchronize", "torch.accelerator.synchronize"))
    out += [(gpucourse, "synchronize", "gpucourse.synchronize"),
            (_asyncqueue, "synchronize", "gpucourse.synchronize")]
    return out


class detect:
    """Context manager recording every synchronization in its body: ``with detect() as log: ...``.

    ``emulate``: treat every tensor as a device tensor (default: True in CPU mode, False on a GPU).
    ``cuda_debug``: on a GPU, also record what ``torch.cuda.set_sync_debug_mode("warn")`` reports (default True).
    ``skip_files``: source files whose frames are not "the learner's line" (e.g. a helper that calls the code).
    """

    def __init__(self, emulate: bool | None = None, cuda_debug: bool = True, skip_files=()):
        self.emulate = (not _device.on_gpu()) if emulate is None else emulate
        self.cuda_debug = cuda_debug and _device.on_gpu()
        self.skip_files = tuple(os.path.abspath(p) for p in skip_files)
        self.log = SyncLog()
        self._mode = None
        self._warn_ctx = None
        self._old_debug = None
        self._patched = []

    def _showwarning(self, message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if "debug mode is a prototype" in text:  # torch's note on switching the mode on: not a synchronization
            return
        if "synchroniz" in text and "CUDA" in text:
            if self._mode is not None and self._mode.inside:
                return  # already recorded by the op that caused it
            fn, ln, function, src = _caller(self.skip_files + (os.path.abspath(warnings.__file__),))
            self.log.append(Sync("CUDA synchronization", "reported by torch.cuda.set_sync_debug_mode "
                                 f"({text.splitlines()[0][:80]})", fn, ln, function, src))
            return
        self._orig_show(message, category, filename, lineno, file, line)

    def __enter__(self) -> SyncLog:
        if self.cuda_debug:
            self._warn_ctx = warnings.catch_warnings()
            self._warn_ctx.__enter__()
            warnings.filterwarnings("always", message=".*synchroniz.*")
            self._orig_show = warnings.showwarning
            warnings.showwarning = self._showwarning
            self._old_debug = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        self._mode = _Detector(self.log, self.emulate, self.skip_files)
        for owner, attr, label in _explicit_waits():
            own = attr in vars(owner)  # else inherited (e.g. from a C base class): removed again on exit
            original = vars(owner)[attr] if own else getattr(owner, attr)
            setattr(owner, attr, self._wrap_wait(getattr(owner, attr), label))
            self._patched.append((owner, attr, original, own))
        self._mode.__enter__()
        return self.log

    def _wrap_wait(self, original, label):
        import functools

        @functools.wraps(original)
        def wait(*args, **kwargs):
            if not self._mode.inside:
                fn, ln, function, src = _caller(self.skip_files)
                self.log.append(Sync(label, "explicit wait: the CPU stops until the GPU has finished", fn, ln,
                                     function, src))
            self._mode.inside += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._mode.inside -= 1
        return wait

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        for owner, attr, original, own in reversed(self._patched):
            if own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)
        self._patched.clear()
        if self.cuda_debug:
            torch.cuda.set_sync_debug_mode(self._old_debug)
            self._warn_ctx.__exit__(*exc)
        return False


def find_syncs(fn, *args, **kwargs) -> tuple:
    """Run ``fn(*args, **kwargs)`` under :class:`detect`; return ``(result, SyncLog)``."""
    with detect() as log:
        out = fn(*args, **kwargs)
    return out, log
