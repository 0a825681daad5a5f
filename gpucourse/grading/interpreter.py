"""Triton's interpreter (CPU mode) held to what a GPU would do with the same kernel (issue 39).

In CPU mode ``TRITON_INTERPRET=1`` runs a ``@triton.jit`` function's body as Python, program by program. Two ways
that differs from a GPU would otherwise reach the verdict:

1. **torch or NumPy doing the work inside a kernel.** A body that calls ``torch.matmul``, ``x.float() @ w``,
   ``np.dot``, a tensor's methods or ``.numpy()`` runs here and computes the answer; on a GPU the same kernel does not
   compile. So, while the interpreter runs a body (:func:`install` wraps the function ``GridExecutor`` calls once per
   program), a TorchFunctionMode and a TorchDispatchMode are on torch's stacks: any torch function, tensor method or
   aten op is a violation (the interpreter's own work in a body is NumPy and its C module, never torch; copying the
   arguments to and from the host happens outside the body and is not seen). Before a kernel first runs its code is
   read (:func:`static_problems`): names that resolve, through its globals, closure or builtins, to NumPy, torch,
   ctypes or the like (an alias such as ``mm = np.matmul`` included), to ``getattr``/``eval``/``__import__``..., and
   attributes that reach into the interpreter (``.handle``, the NumPy array behind a ``tl.tensor``) or out of torch
   (``.numpy``, ``.data_ptr``); the Triton functions and plain Python helpers it refers to are read the same way.
   A violation raises :class:`KernelBodyError` (the learner's call fails, as the GPU's compile error would) and is
   kept (:func:`violations_since`), so that a body or caller swallowing the exception still fails the case
   (launches.py counts it as a use of torch).
2. **bf16 arithmetic.** The interpreter keeps bfloat16 as raw ``uint16`` bit patterns and computes ``+``, ``*``,
   comparisons, ``tl.dot``, ``tl.max``... on the bits as integers (upstream: the interpreter does not support bf16),
   so a right kernel doing bf16 arithmetic got garbage (often told "elements never written"). :func:`install`
   patches the interpreter's builder so a bf16 operand is widened to float32, the op computed there and the result
   rounded back to bf16 to nearest even, as a GPU does; float32 -> bf16 casts round to nearest even too (the
   interpreter truncated). Those patches are in gpucourse/interpreter_bf16.py.

Not covered: NumPy reached without any name or attribute above (arrays prepared by the host and handed over in a
container, combined with operators, which call no function); code that removes torch's modes is caught only when
they are missing as the body returns. bf16 atomics and libdevice calls are still done on the bits.
Only Triton's interpreter is touched: on a GPU (or without Triton) :func:`install` does nothing.
"""
from __future__ import annotations

import inspect
import os
import sys
import types

from .. import interpreter_bf16

# First in every message: the grader keeps the first 200 characters of an exception's line.
RULE = ("a Triton kernel's body may only use Triton (tl.*) operations, not torch or NumPy (on a GPU this kernel would "
        "not compile)")
RAN = "; in CPU mode Triton's interpreter runs the body as Python, so the call was stopped here"
_MARK = interpreter_bf16.MARK
# Modules whose functions, classes and objects a kernel body may not refer to (by the top package name).
COMPUTE_PACKAGES = frozenset(("torch", "numpy", "ctypes", "_ctypes", "cffi", "scipy", "jax", "jaxlib", "cupy",
                              "numba", "pandas", "sys", "importlib", "builtins", "gc", "inspect", "operator"))
ESCAPE_BUILTINS = frozenset(("getattr", "setattr", "delattr", "eval", "exec", "compile", "__import__", "globals",
                             "vars", "locals", "open", "breakpoint", "memoryview"))
ESCAPE_ATTRIBUTES = frozenset(("handle", "numpy", "__array__", "__array_interface__", "__dlpack__", "data_ptr",
                               "untyped_storage", "tolist", "__globals__", "__builtins__", "__dict__", "__code__",
                               "__closure__", "__subclasses__", "f_globals", "f_locals", "f_back", "gi_frame"))
_LIBRARY = COMPUTE_PACKAGES | {"triton", "gpucourse", "math", "functools", "typing", "dataclasses", "enum"}

_violations: list = []  # every violation seen in this process (messages), in order: launches.py reads the tail
_names_cache: dict = {}  # code object -> (global names, attribute names); globals are resolved at every launch


class KernelBodyError(RuntimeError):
    """A kernel body used torch or NumPy (or reached around Triton): what a GPU's compiler would refuse."""

    def __repr__(self) -> str:  # the interpreter re-raises repr(e) inside its InterpreterError: keep it readable
        return str(self)


def _record(message: str) -> KernelBodyError:
    _violations.append(message)
    return KernelBodyError(message)


def mark() -> int:
    return len(_violations)


def violations_since(start: int) -> list:
    """The violations recorded since :func:`mark` returned ``start`` (distinct, in order)."""
    seen = []
    for v in _violations[start:]:
        if v not in seen:
            seen.append(v)
    return seen


# ---------------------------------------------------------------------------------------------------------------------
# 1a. Reading a kernel's code.


def _root(module_name) -> str:
    return str(module_name or "").split(".")[0]


def _origin(value) -> str:
    """The top package a value comes from: a module's, a function's or class's ``__module__``, else its type's."""
    if isinstance(value, types.ModuleType):
        return _root(value.__name__)
    try:
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)) or \
                callable(value):
            own = getattr(value, "__module__", None)
            if isinstance(own, str) and own:
                if _root(own) in COMPUTE_PACKAGES:
                    return _root(own)
                self_ = getattr(value, "__self__", None)  # a bound method of an array or a tensor
                if self_ is not None and not isinstance(self_, types.ModuleType):
                    return _root(type(self_).__module__)
                return _root(own)
        return _root(type(value).__module__)
    except Exception:  # noqa: BLE001 - an object whose attributes raise: not something a kernel legitimately uses
        return "?"


def _describe(name: str, value) -> str:
    if isinstance(value, types.ModuleType):
        return f"`{name}` (the {value.__name__} module)"
    return f"`{name}` ({_origin(value)}: {type(value).__name__})"


def _jit_function(value):
    """The Python function behind a Triton kernel object (JITFunction, InterpretedFunction, autotuner...), or None."""
    seen = 0
    while value is not None and seen < 8 and not isinstance(value, types.FunctionType):
        mod = _root(type(value).__module__)
        if mod != "triton":
            return None
        value = getattr(value, "fn", None)
        seen += 1
    return value if isinstance(value, types.FunctionType) else None


def _codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


_GLOBAL_OPS = frozenset(("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_GLOBALS",
                         "LOAD_FROM_DICT_OR_DEREF"))
_ATTR_OPS = frozenset(("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR", "LOAD_SUPER_ATTR"))


def _names(code) -> tuple:
    """(names the code loads from its closure, globals or builtins; attribute names it reads or writes)."""
    import dis

    if code in _names_cache:
        return _names_cache[code]
    free, attrs = set(), set()
    for ins in dis.get_instructions(code):
        if ins.opname in _GLOBAL_OPS and isinstance(ins.argval, str):
            free.add(ins.argval)
        elif ins.opname in _ATTR_OPS and isinstance(ins.argval, str):
            attrs.add(ins.argval)
    _names_cache[code] = sorted(free), sorted(attrs)
    return _names_cache[code]


def _value_problems(name: str, value, where: str, queue: list, depth: int = 0) -> list:
    """What is wrong with a kernel referring to ``value`` (by ``name``); functions to read next go into ``queue``."""
    if depth > 2:
        return []
    origin = _origin(value)
    if origin in COMPUTE_PACKAGES and not (origin == "builtins" and not isinstance(value, types.ModuleType)):
        return [f"{where} refers to {_describe(name, value)}"]
    if origin == "builtins":
        if getattr(value, "__name__", None) in ESCAPE_BUILTINS and callable(value):
            return [f"{where} calls the builtin `{value.__name__}`"]
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            items = value.values() if isinstance(value, dict) else value
            out = []
            for item in list(items)[:64]:
                out += _value_problems(f"{name}[...]", item, where, queue, depth + 1)
            return out
        return []
    if origin == "triton":
        fn = _jit_function(value)
        if fn is not None:
            queue.append(fn)
        return []
    if isinstance(value, types.FunctionType):  # a plain Python helper the body calls: read it too
        queue.append(value)
        return []
    if origin not in _LIBRARY:  # an object or class of the learner's: what it holds and its methods
        out = []
        holders = [getattr(value, "__dict__", {})] if isinstance(value, type) else \
            [getattr(value, "__dict__", {}), getattr(type(value), "__dict__", {})]
        for holder in holders:
            if not isinstance(holder, (dict, types.MappingProxyType)):
                continue
            for key, item in list(holder.items())[:64]:
                if isinstance(item, (staticmethod, classmethod)):
                    item = item.__func__
                if isinstance(item, types.FunctionType):
                    queue.append(item)
                elif not (key.startswith("__") and key.endswith("__")):
                    out += _value_problems(f"{name}.{key}", item, where, queue, depth + 1)
        return out
    return []


def static_problems(fn) -> list:
    """What the code of the Python function behind a kernel (and the Triton functions and plain helpers it refers
    to) uses that a Triton kernel may not: see the module's docstring. Empty: nothing found."""
    fn = _jit_function(fn) or fn
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    problems, queue, done = [], [fn], set()
    while queue and len(done) < 64:
        f = queue.pop(0)
        if not isinstance(f, types.FunctionType) or f.__code__ in done:
            continue
        done.add(f.__code__)
        where = f"the Triton kernel `{f.__name__}`" if f is fn else \
            f"`{f.__name__}` (called from the Triton kernel `{fn.__name__}`)"
        glb = f.__globals__
        builtins_ = glb.get("__builtins__", {})
        builtins_ = vars(builtins_) if isinstance(builtins_, types.ModuleType) else builtins_
        closure = {k: c.cell_contents for k, c in zip(f.__code__.co_freevars, f.__closure__ or ()) if _filled(c)}
        for code_ in _codes(f.__code__):
            free, attrs = _names(code_)
            for name in attrs:
                if name in ESCAPE_ATTRIBUTES:
                    what = ("the interpreter's NumPy array behind a tl tensor" if name == "handle" else
                            "it leaves Triton for torch/NumPy/Python objects")
                    problems.append(f"{where} uses `.{name}` ({what})")
            for name in free:
                for scope in (closure, glb, builtins_):
                    if name in scope:
                        problems += _value_problems(name, scope[name], where, queue)
                        break
    return list(dict.fromkeys(problems))


def _filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------------------------------
# 1b. Torch while a body runs.


def _line_in_kernel() -> str:
    """' (line N of file.py)' for the innermost frame of the learner's code, or ''."""
    frame = sys._getframe(2)
    while frame is not None:
        root = frame.f_code.co_filename
        if not any(part in root for part in (os.sep + "torch" + os.sep, os.sep + "triton" + os.sep, __file__)):
            return f" (line {frame.f_lineno} of {os.path.basename(root)})"
        frame = frame.f_back
    return ""


def _func_name(func) -> str:
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)
    module = getattr(func, "__module__", None) or ""
    if name.startswith("TensorBase.") or name.startswith("Tensor."):
        return "Tensor." + name.split(".", 1)[1]
    if name.startswith("_TensorBase."):
        return "Tensor." + name.split(".", 1)[1]
    return f"{module}.{name}" if module.startswith("torch") and not name.startswith("torch") else name


_MODE_CLASSES: list = []


def _body_modes(kernel: str):
    """A TorchFunctionMode and a TorchDispatchMode that refuse every torch call and op (a kernel body's)."""
    if not _MODE_CLASSES:
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        class _BodyFunctions(TorchFunctionMode):
            def __init__(self, kernel):
                super().__init__()
                self.kernel = kernel

            def __torch_function__(self, func, types_, args=(), kwargs=None):
                raise _record(f"{RULE}: the Triton kernel `{self.kernel}` calls {_func_name(func)}"
                              f"{_line_in_kernel()}{RAN}")

        class _BodyOps(TorchDispatchMode):
            def __init__(self, kernel):
                super().__init__()
                self.kernel = kernel

            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                raise _record(f"{RULE}: the Triton kernel `{self.kernel}` runs torch's {func}{_line_in_kernel()}{RAN}")

        _MODE_CLASSES[:] = [_BodyFunctions, _BodyOps]
    return _MODE_CLASSES[0](kernel), _MODE_CLASSES[1](kernel)


_depth = [0]


def _run_guarded(fn, kernel: str, args, kwargs):
    if _depth[0]:  # a Triton function called from a body: already guarded
        return fn(*args, **kwargs)
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    fmode, dmode = _body_modes(kernel)
    _depth[0] += 1
    try:
        with fmode, dmode:
            out = fn(*args, **kwargs)
            if not (_get_current_dispatch_mode_stack()[-1:] == [dmode] and
                    _get_current_function_mode_stack()[-1:] == [fmode]):
                raise _record(f"{RULE}: the Triton kernel `{kernel}` changed torch's mode stacks in its body (switched "
                              f"off the grader's checks?)")
        return out
    finally:
        _depth[0] -= 1


def _guarded(fn, kernel: str):
    """``fn`` (the function the interpreter runs per program) run with torch's modes refusing every op. The result
    keeps ``fn``'s globals (its code reads only its closure), signature and annotations: the interpreter reads them."""
    run = _run_guarded

    def body(*args, **kwargs):
        return run(fn, kernel, args, kwargs)

    guarded = types.FunctionType(body.__code__, fn.__globals__, fn.__name__, None, body.__closure__)
    guarded.__signature__ = inspect.signature(fn)
    guarded.__annotations__ = dict(getattr(fn, "__annotations__", {}))
    guarded.__qualname__ = fn.__qualname__
    guarded.__module__ = fn.__module__
    guarded.__wrapped__ = fn
    setattr(guarded, _MARK, True)
    return guarded


def _wrap_executor(cls) -> None:
    orig = cls.__init__
    if getattr(orig, _MARK, False):
        return

    def __init__(self, fn, *args, **kwargs):
        orig(self, fn, *args, **kwargs)
        inner = getattr(self, "fn", None)
        if not isinstance(inner, types.FunctionType) or getattr(inner, _MARK, False):
            return
        problems = static_problems(inner)
        if problems:
            raise _record(f"{RULE}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                                        else ""))
        self.fn = _guarded(inner, inner.__name__)

    __init__.__wrapped__ = orig
    setattr(__init__, _MARK, True)
    cls.__init__ = __init__


# ---------------------------------------------------------------------------------------------------------------------


def active() -> bool:
    """Whether Triton kernels run in Triton's interpreter here (CPU mode)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def install() -> bool:
    """In CPU mode, hook Triton's interpreter (idempotent: marks live on what is patched, not in this module, which
    the grader's worker restores after each call). Returns whether the interpreter is hooked."""
    if not active():
        return False
    try:
        from triton.runtime import interpreter as interp
    except Exception:  # noqa: BLE001 - no Triton, or one without an interpreter: nothing to hold to account
        return False
    executor = getattr(interp, "GridExecutor", None)
    if executor is None:
        return False
    _wrap_executor(executor)
    try:
        interpreter_bf16.install(interp, _MARK)
    except AttributeError:  # an interpreter laid out otherwise (another Triton): leave bf16 as it is
        pass
    return True
