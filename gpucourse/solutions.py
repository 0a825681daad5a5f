"""The reference solutions, loaded from the one place they live: the solved workbooks in ``solutions/``.

``load_solutions("05_triton")`` runs that notebook's solution cells (those holding ``### BEGIN SOLUTION``) and its
import-only cells, in order, in a fresh namespace, and returns the namespace. Benchmarks and tests use it so the
kernels they measure are exactly the ones the workbook teaches, never a copy that drifts.
"""
from __future__ import annotations

import linecache
import os

from .workbooks import code_cells

SOLUTION_MARKER = "### BEGIN SOLUTION"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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

    ``import gpucourse`` must come first (it is one of the import cells), so Triton runs in the interpreter in CPU
    mode exactly as in the notebook.
    """
    source = solution_source(stem)
    filename = f"<solutions/{stem}.ipynb>"
    # @triton.jit reads each kernel's source through inspect, which finds it in linecache (as for notebook cells).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": f"gpucourse_solutions_{stem.replace('-', '_')}"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace
