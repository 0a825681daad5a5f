"""Judged exercises in the batch grader's worker: the exercise's judge runs on helpers the submission cannot have
changed, and sees only plain values from the learner's function.

A judged exercise (``JudgedExercise``) is decided by code that runs next to the learner's function: it watches the
call (synchronizations, timings) and then compares what came back. In the worker that code shares its process with a
possibly hostile submission, which could patch what the judge relies on -- ``torch.allclose``,
``gpucourse.syncs.detect``, a tolerance constant, the sync detector's tables, a global forward hook -- while it is
imported or while it is called. So the worker:

* takes a :class:`Snapshot` before the submission is loaded: the attributes of the course's modules (with the
  contents of their dicts, lists and sets), the functions, classes and constants of torch and of the standard library
  modules judges use, the code of their Python functions and the dicts of their classes, ``sys.modules`` entries,
  torch's function/dispatch mode stacks and torch-function state, grad mode, the default dtype, trace/profile hooks
  and ``gc.callbacks``;
* restores it before the first case and again each time the learner's function returns (:func:`sealed`), so a
  patch made at import or during a call is undone before the judge's own code runs. What had to be undone comes back
  to the grader, which flags it. After each verdict it checks that nothing changed while the judge was deciding (a
  thread, a finalizer or a hook of the submission): if something did, the case is an error, not a verdict;
* hands the judge plain values instead of what the function returned (:func:`plain`): exact dicts, lists, tuples,
  strings and numbers, plain ``torch.Tensor`` (a subclass could answer ``torch.allclose`` with True through
  ``__torch_function__``), and an inert stand-in for any other object (whose ``__eq__`` or ``__class__`` could lie).

What this does not stop: code written to reach the worker's frames or its channel, or to keep running beside the
judge (a thread, an audit hook, a dispatcher kernel registered through ``torch.library``), can still forge a verdict
from inside the process. The grader flags such source for a human look (grader.SUSPICIOUS).
"""
from __future__ import annotations

import builtins
import gc
import sys
import threading
import types

import torch

COURSE = "gpucourse"
# Restored in full: every attribute, the contents of dicts/lists/sets, functions' code; keys added later are removed.
DEEP_MODULES = ("torch.nn.modules.module", "torch.optim.optimizer")  # + every gpucourse module (global hooks live here)
# Restored by identity: functions, classes, modules and numeric/dtype constants (not flags and caches, which torch
# sets lazily), the code of their Python functions and the dicts of their classes.
SHALLOW_MODULES = (
    "builtins", "math", "cmath", "statistics", "copy", "time", "os", "os.path", "functools", "operator", "itertools",
    "collections", "linecache", "warnings", "traceback", "dataclasses", "numbers", "contextlib", "gc", "inspect",
    "queue", "threading", "random",
    "torch", "torch.nn", "torch.nn.functional", "torch.overrides", "torch.testing", "torch.cuda", "torch.optim",
    "torch.optim.sgd", "torch.autograd", "torch.autograd.grad_mode", "torch._tensor", "torch._tensor_str",
    "torch.functional", "torch.utils._python_dispatch", "torch.nn.parameter", "torch.nn.modules.linear",
    "torch.nn.modules.activation", "torch.nn.modules.container", "torch.nn.modules.loss", "torch.random",
    "numpy",
)
SYS_FUNCTIONS = ("_getframe", "exc_info", "exception", "getrecursionlimit", "intern")
_FUNC_FIELDS = ("__code__", "__defaults__", "__kwdefaults__")
_CONTAINERS = (dict, list, set)  # and their subclasses (OrderedDict: torch's global hook registries)
_BUILTIN_NAMES = frozenset(vars(builtins))  # as they are before any submission runs


class Tampered(Exception):
    """The submission keeps changing what the judge relies on, or removed the judge's hooks from torch's stacks."""


def _is_heap_class(obj) -> bool:
    return isinstance(obj, type) and not (obj.__flags__ & (1 << 8))  # Py_TPFLAGS_IMMUTABLETYPE: cannot be patched


def _function_state(fn):
    return tuple(getattr(fn, f, None) for f in _FUNC_FIELDS)


class Snapshot:
    """What the judges rely on, as it is now. :meth:`restore` puts it back and says what it had to undo."""

    def __init__(self):
        self.modules = {}  # name -> (module, dict copy, deep?)
        self.contents = {}  # (module name, key) -> copy of a dict/list/set's contents (deep modules)
        self.functions = {}  # id -> (function, (code, defaults, kwdefaults)); kept alive through self.modules
        self.classes = {}  # class -> dict copy
        self.objects = {}  # id -> (object held by a course module, "module.attr", its methods set on the instance)
        for name, module in list(sys.modules.items()):
            course = _is_course(name)
            deep = course or name in DEEP_MODULES
            if module is None or not (deep or name in SHALLOW_MODULES):
                continue
            attrs = dict(vars(module))
            self.modules[name] = (module, attrs, deep)
            for key, value in attrs.items():
                if deep and isinstance(value, _CONTAINERS) and (course or key.startswith("_global")):  # torch: hooks
                    self.contents[(name, key)] = value.copy()
                if course and _plain_object(value):
                    self.objects[id(value)] = (value, f"{name}.{key}", _callables(value))
                self._note(value, name)
        self.threads = set(threading.enumerate())
        self.trace, self.profile = sys.gettrace(), sys.getprofile()
        self.gc_callbacks = list(gc.callbacks)
        self.sys_functions = {k: getattr(sys, k) for k in SYS_FUNCTIONS if hasattr(sys, k)}
        self.function_modes, self.dispatch_modes = _function_modes(), _dispatch_modes()
        self.torch_function_state = torch._C._get_torch_function_state()
        self.grad_enabled = torch.is_grad_enabled()
        self.default_dtype = torch.get_default_dtype()

    def _note(self, value, module_name: str) -> None:
        if isinstance(value, types.FunctionType):
            self.functions[id(value)] = (value, _function_state(value))
        elif _is_heap_class(value) and value not in self.classes and \
                str(getattr(value, "__module__", "")).split(".")[0] in (COURSE, "torch", module_name.split(".")[0]):
            attrs = dict(vars(value))
            self.classes[value] = attrs
            for member in attrs.values():  # methods, staticmethods/classmethods, properties
                for fn in (member, _safe_getattr(member, "__func__"), _safe_getattr(member, "fget")):
                    if isinstance(fn, types.FunctionType):
                        self.functions[id(fn)] = (fn, _function_state(fn))

    def restore(self) -> list:
        """Undo every change to what was snapshotted; returns what had to be undone (empty: nothing was touched).
        Raises :class:`Tampered` when changes come back while restoring (a thread or a hook keeps patching) or when
        modes were removed from torch's stacks."""
        changed = []
        for _ in range(3):
            found = self._restore_once()
            if not found:
                return changed
            changed += [c for c in found if c not in changed]
        raise Tampered("what the judge relies on keeps changing while it is being restored (a thread or a hook in "
                       "the submission?): " + ", ".join(changed[:8]))

    def _restore_once(self) -> list:
        changed, silent = [], []
        for name, (module, attrs, deep) in self.modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
                changed.append(f"sys.modules[{name!r}]")
            current = vars(module)
            if any(type(k) is not str for k in current):  # a key with its own __eq__ would run during lookups
                kept = {k: v for k, v in current.items() if type(k) is str}
                current.clear()
                current.update(kept)
                changed.append(f"{name} (keys that are not strings)")
            # The grader's own bookkeeping (launch counters...) changes whenever a notebook calls gpucourse.check().
            books = silent if name.startswith(COURSE + ".grading") else changed
            for key, value in attrs.items():
                now = current.get(key, _MISSING)
                if now is not value and (deep or _restorable(value)) and not _same_constant(now, value):
                    current[key] = value
                    if value is None or (books is silent and not callable(value)):  # a lazy cache being filled
                        silent.append(key)
                    else:
                        _note_change(changed, f"{name}.{key}", now, value)
                saved = self.contents.get((name, key))
                if saved is not None and _differs(value, saved):
                    if isinstance(value, list):
                        value[:] = saved
                    else:
                        value.clear()
                        value.update(saved)
                    books.append(f"the contents of {name}.{key}")
            for key in [k for k in current if k not in attrs]:
                if (deep and not isinstance(current[key], types.ModuleType)) or \
                        (name != "builtins" and key in _BUILTIN_NAMES):
                    del current[key]
                    changed.append(f"{name}.{key} (added)")
        for name in [n for n in sys.modules if _is_course(n) and n not in self.modules]:
            del sys.modules[name]  # imported since the snapshot (by the submission): a judge's import gets a fresh one
        for cls, attrs in self.classes.items():
            current = cls.__dict__
            course = _is_course(_module_of(cls))
            for key, value in attrs.items():  # outside the course, class-level data (counters, flags) is left alone
                now = current.get(key, _MISSING)
                if now is not value and (course or not _is_data(value)):
                    _set_class_attr(cls, key, value)
                    _note_change(changed, f"{_qualname(cls)}.{key}", now, value)
            for key in [k for k in current if k not in attrs]:
                if course or not _is_data(current[key]):
                    now = current[key]
                    _del_class_attr(cls, key)
                    if _inherited(cls, key) is not now:  # re-setting what it inherited (guards.py does) is no change
                        changed.append(f"{_qualname(cls)}.{key} (added)")
        for obj, where, methods in self.objects.values():  # e.g. the stand-in device queue's put/join replaced
            current = _instance_dict(obj)
            if current is None:
                continue
            for key in [k for k, v in current.items() if callable(v) and k not in methods]:
                del current[key]
                changed.append(f"{where}.{key} (a method set on the object)")
            for key, value in methods.items():
                if current.get(key, _MISSING) is not value:
                    current[key] = value
                    changed.append(f"{where}.{key} (a method set on the object)")
        for fn, state in self.functions.values():
            if any(now is not then for now, then in zip(_function_state(fn), state)):
                for field, value in zip(_FUNC_FIELDS, state):
                    setattr(fn, field, value)
                changed.append(f"the code of {getattr(fn, '__module__', '?')}.{fn.__qualname__}")
        for key, value in self.sys_functions.items():
            if getattr(sys, key, None) is not value:
                setattr(sys, key, value)
                changed.append(f"sys.{key}")
        if sys.gettrace() is not self.trace or sys.getprofile() is not self.profile:
            sys.settrace(self.trace)
            sys.setprofile(self.profile)
            changed.append("sys.settrace/setprofile (a trace hook)")
        if len(gc.callbacks) != len(self.gc_callbacks) or any(a is not b for a, b in zip(gc.callbacks,
                                                                                           self.gc_callbacks)):
            gc.callbacks[:] = self.gc_callbacks
            changed.append("gc.callbacks")
        changed += _trim_modes(self.function_modes, self.dispatch_modes)
        if torch._C._get_torch_function_state() != self.torch_function_state:
            torch._C._set_torch_function_state(self.torch_function_state)
            changed.append("torch's function-dispatch state (DisableTorchFunction left on)")
        if torch.is_grad_enabled() != self.grad_enabled:
            torch.set_grad_enabled(self.grad_enabled)
            changed.append("grad mode")
        if torch.get_default_dtype() != self.default_dtype:
            torch.set_default_dtype(self.default_dtype)
            changed.append("the default dtype")
        return changed

    def new_threads(self) -> list:
        """Names of live threads started since the snapshot, other than the course's own stand-in GPU queue."""
        return [str(t.name)[:60] for t in threading.enumerate() if t not in self.threads and not _stand_in_gpu(t)]


def _note_change(changed: list, what: str, now, value) -> None:
    """Record a restored attribute, unless the new value merely wraps the old one (torch does that itself, lazily:
    ``torch.manual_seed`` and ``Optimizer.step`` get wrapped on the first ``opt.step()``). It is restored either way;
    this only keeps the grader's flags about the submission."""
    wrapper = type(now) is types.FunctionType and now.__dict__.get("__wrapped__") is value  # runs no learner code
    if not wrapper:
        changed.append(what)


def _same_constant(now, value) -> bool:
    """An equal immutable value of the same exact type (``_mode = "cpu"`` set again) is no change."""
    return type(now) is type(value) and type(value) in (bool, int, float, str, bytes) and now == value


def _inherited(cls, key):
    for base in type.__dict__["__mro__"].__get__(cls)[1:]:
        if key in base.__dict__:
            return base.__dict__[key]
    return _MISSING


def _is_data(value) -> bool:
    return value is None or type(value) in (bool, int, str, bytes, tuple, dict, list, set)


def _restorable(value) -> bool:
    """In a shallow module: what a submission could swap to change a judge's behaviour, and torch never reassigns."""
    return callable(value) or isinstance(value, (types.ModuleType, torch.dtype, float, complex))


_MISSING = object()


def _is_course(module_name: str) -> bool:
    return module_name == COURSE or module_name.startswith(COURSE + ".")


def _safe_getattr(obj, name: str):
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _course_queue_worker():
    from .. import asyncqueue  # bound when this module is imported: before any submission is loaded

    return asyncqueue.worker


_QUEUE_WORKER = _course_queue_worker()


def _stand_in_gpu(t) -> bool:
    """The course's own thread that plays the GPU queue in CPU mode (asyncqueue), recognised by what it runs."""
    import queue

    args = getattr(t, "_args", ()) if type(t) is threading.Thread else ()
    return getattr(t, "_target", None) is _QUEUE_WORKER and len(args) == 1 and type(args[0]) is queue.Queue


def _instance_dict(obj):
    try:
        d = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return None
    return d if type(d) is dict else None


def _plain_object(value) -> bool:
    """An instance (not a module, class, function or container) whose own ``__dict__`` could hold replaced methods:
    the course's stand-in device queue, a detector's state."""
    return not isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                                  types.MethodType, *_CONTAINERS, str, bytes, int, float, complex, tuple)) and \
        value is not None and _instance_dict(value) is not None


def _callables(obj) -> dict:
    return {k: v for k, v in (_instance_dict(obj) or {}).items() if callable(v)}


def _differs(value, saved) -> bool:
    if isinstance(value, dict):
        return len(value) != len(saved) or any(value.get(k, _MISSING) is not v for k, v in saved.items())
    if isinstance(value, list):
        return len(value) != len(saved) or any(a is not b for a, b in zip(value, saved))
    return value != saved


def _set_class_attr(cls, key, value) -> None:
    try:
        setattr(cls, key, value)
    except (AttributeError, TypeError):
        pass


def _del_class_attr(cls, key) -> None:
    try:
        delattr(cls, key)
    except (AttributeError, TypeError):
        pass


def _module_of(cls) -> str:
    return str(type.__dict__["__module__"].__get__(cls))


def _qualname(cls) -> str:
    return f"{_module_of(cls)}.{type.__dict__['__qualname__'].__get__(cls)}"


def _function_modes() -> list:
    from torch.overrides import _get_current_function_mode_stack

    return list(_get_current_function_mode_stack())


def _dispatch_modes() -> list:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return list(_get_current_dispatch_mode_stack())


def _trim_modes(function_modes: list, dispatch_modes: list) -> list:
    """Pop modes pushed on top of the expected stacks; Tampered if the expected modes themselves were removed."""
    from torch.utils._python_dispatch import _pop_mode

    changed = []
    now = _function_modes()
    if now[:len(function_modes)] != function_modes or len(now) < len(function_modes):
        raise Tampered("torch's function-mode stack was changed under the judge (its sync detector removed?)")
    while torch._C._len_torch_function_stack() > len(function_modes):
        torch._C._pop_torch_function_stack()
        changed.append("a TorchFunctionMode left on torch's stack")
    now = _dispatch_modes()
    if now[:len(dispatch_modes)] != dispatch_modes or len(now) < len(dispatch_modes):
        raise Tampered("torch's dispatch-mode stack was changed under the judge")
    while len(_dispatch_modes()) > len(dispatch_modes):
        _pop_mode()
        changed.append("a TorchDispatchMode left on torch's stack")
    return changed


class _Stand_in:
    """Takes the place of a returned object that is not a plain value: judges see its type's name, nothing else."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} object>"


_STAND_INS: dict = {}


def _stand_in(cls) -> object:
    name = str.__str__(type.__dict__["__name__"].__get__(cls))
    kind = _STAND_INS.get(name)
    if kind is None:
        kind = _STAND_INS[name] = type(name, (_Stand_in,), {"__slots__": ()})
    return kind()


def plain(value, depth: int = 0):
    """``value`` rebuilt from exact builtin types and plain tensors, without running any of the learner's code (no
    ``__eq__``, ``__iter__``, ``__float__``, ``__torch_function__``...). Anything else becomes an inert stand-in."""
    cls = type(value)
    if value is None or cls in (bool, int, float, complex, str, bytes):
        return value
    if depth > 32:
        return _stand_in(cls)
    if issubclass(cls, torch.Tensor):
        return torch.Tensor.as_subclass(value, torch.Tensor)  # ignored by __torch_function__: no learner code runs
    if cls in (torch.dtype, torch.device, torch.Size):
        return value
    if issubclass(cls, bool):
        return bool.__bool__(value)
    if issubclass(cls, int):
        return int.__int__(value)
    if issubclass(cls, float):  # numpy.float64 included
        return float.__float__(value)
    if issubclass(cls, str):
        return str.__str__(value)
    if issubclass(cls, dict):
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in dict.items(value)}
    if issubclass(cls, list):
        return [plain(v, depth + 1) for v in list.__iter__(value)]
    if issubclass(cls, tuple):
        return tuple(plain(v, depth + 1) for v in tuple.__iter__(value))
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if issubclass(cls, numpy.generic):
            return plain(numpy.generic.item(value), depth + 1)
        if issubclass(cls, numpy.ndarray):
            return numpy.array(value, subok=False, copy=True)
    return _stand_in(cls)


def sealed(fn, changed: list, threads: list):
    """``fn`` as a judge should call it. When it returns (or raises), everything :class:`Snapshot` covers is put
    back as it was when the call began, so nothing the call patched survives into the judge's own code; what was
    undone is appended to ``changed``, the names of threads it left running to ``threads`` (torch.compile leaves a
    worker pool; anything they change while the judge decides is caught after the verdict, see worker.py). What it
    returns is made :func:`plain`."""

    def call(*args, **kwargs):
        before = Snapshot()
        try:
            out = plain(fn(*args, **kwargs))
        finally:
            gc.collect()  # finalizers of the learner's garbage run now, before the restore, not amid the verdict
            changed.extend(c for c in before.restore() if c not in changed)
        threads.extend(t for t in before.new_threads() if t not in threads)
        return out

    call.__name__ = getattr(fn, "__name__", "fn")
    call.__doc__ = getattr(fn, "__doc__", None)
    return call
