"""Judged exercises whose answer the course's package already computes (the instructor's own code, importable by any
submission: ``waves.gemm_waves``, ``trainloop.train_fixed``...): while the learner's function runs, those functions
raise instead of answering.

:func:`trapped` swaps each function's code for one that raises :class:`CourseSolutionUsed` (a RuntimeError), and puts
the code back when the block ends. Swapping the code, not the module attribute, reaches every reference to the
function, a ``from ... import`` made when the submission was loaded included. A judge computes its expected answer
before the block (see ``Exercise.judge``), so the judge itself never meets the trap.

What it does not stop: a copy of the code (the package's source is readable), or a module reloaded under the trap
(new function objects). The grader flags sources that import the course's lessons for a human look.
"""
from __future__ import annotations

import contextlib


class CourseSolutionUsed(RuntimeError):
    """The learner's function called the course's own solution."""


def _trap_code(qualname: str, module: str):
    """Code that raises CourseSolutionUsed's message, written with builtins only (it runs with the trapped function's
    globals, which do not know this module)."""
    message = (f"{module}.{qualname} is the course's own solution to this exercise: write your own instead of "
               f"calling it")
    source = f"def trap(*args, **kwargs):\n    raise RuntimeError({message!r})\n"
    ns: dict = {}
    exec(compile(source, f"<the course's {qualname}, off limits>", "exec"), ns)
    return ns["trap"].__code__


@contextlib.contextmanager
def trapped(*functions):
    """Inside the block, each of ``functions`` raises a RuntimeError naming itself when called."""
    saved = []
    try:
        for fn in functions:
            saved.append((fn, fn.__code__))
            fn.__code__ = _trap_code(fn.__qualname__, fn.__module__)
        yield
    finally:
        for fn, code in saved:
            fn.__code__ = code
