"""The reference solutions, loaded from the one place they live: the solved workbooks in ``solutions/``.

``load_solutions("05_triton")`` runs that notebook's solution cells (those holding ``### BEGIN SOLUTION``) and its
import-only cells, in order, in a fresh namespace, and returns the namespace. Benchmarks and tests use it so the
kernels they measure are exactly the ones the workbook teaches, never a copy that drifts.

A lesson module reaches its own solved workbook through ``solutions = for_lesson(LESSON)``. Reaching another
lesson's (``cached_solutions("05_triton")`` in lesson 06) is a dependency between lessons that the import rule
(tests/test_layout.py) cannot see, so the module declares it: ``USES_WORKBOOKS = ("05_triton",)``, which
tests/test_specs.py holds against every call.
"""
from __future__ import annotations

import functools
import linecache
import os
from typing import Callable

from .workbooks import ROOT, code_cells

SOLUTION_MARKER = "### BEGIN SOLUTION"


def solution_path(stem: str) -> str:
    path = os.path.join(ROOT, "solutions", f"{stem}.ipynb")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no solution workbook {path}: the reference solutions ship with the repository "
                                f"checkout, not with a pip-installed gpucourse")
    return path


def _is_import_only(source: str) -> bool:
    lines = [ln.strip() for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return bool(lines) and all(ln.startswith(("import ", "from ")) for ln in lines)


def solution_source(stem: str) -> str:
    """The Python program the solutions consist of: import-only cells and solution cells, in notebook order."""
    cells = [s for s in code_cells(solution_path(stem)) if SOLUTION_MARKER in s or _is_import_only(s)]
    if not any(SOLUTION_MARKER in c for c in cells):
        raise ValueError(f"solutions/{stem}.ipynb has no cell with {SOLUTION_MARKER!r}")
    return "\n\n".join(cells) + "\n"


def load_solutions(stem: str) -> dict:
    """Execute the solution code of ``solutions/<stem>.ipynb`` in a fresh namespace and return it.

    The notebook's first cell (``import gpucourse`` then ``gpucourse.setup()``) is not import-only, so it is not
    among the cells run; importing this module has already imported gpucourse, which is what selects the mode, so
    Triton runs in its interpreter in CPU mode exactly as in the notebook.
    """
    source = solution_source(stem)
    filename = f"<solutions/{stem}.ipynb>"
    # @triton.jit reads each kernel's source through inspect, which finds it in linecache (as for notebook cells).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": f"gpucourse_solutions_{stem.replace('-', '_')}"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


@functools.lru_cache(maxsize=None)
def cached_solutions(stem: str) -> dict:
    """:func:`load_solutions`, run once per workbook and shared: what the benchmark suites use, so the kernels are
    compiled (and autotuned) once however many benchmarks ask for them. Callers must not change the namespace."""
    return load_solutions(stem)


def for_lesson(lesson) -> Callable[[], dict]:
    """A lesson module's ``solutions``: a function that returns the namespace of ``lesson``'s own solved workbook
    (``lesson``: its ``LESSON``), loaded on the first call and shared with every other caller
    (:func:`cached_solutions`)."""
    stem = lesson.notebook

    def solutions() -> dict:
        return cached_solutions(stem)

    solutions.__doc__ = f"The namespace of solutions/{stem}.ipynb, loaded once (gpucourse.solutions.for_lesson)."
    solutions.__qualname__ = solutions.__name__ = "solutions"
    return solutions
