"""The course's solution markers are nbgrader's: solutions/ released by nbgrader's rules agree with exercises/.

nbgrader's release step for solution regions is its ``ClearSolutions`` preprocessor (nbgrader 0.9.6,
``nbgrader/preprocessors/clearsolutions.py``). Its rules, which ``release_cell`` below follows line for line:

* in every cell, a line that *contains* ``BEGIN SOLUTION`` starts a region and a line that contains ``END SOLUTION``
  ends it (substring tests, checked in that order, so a line holding both only begins one); a second BEGIN inside a
  region raises "encountered nested begin solution statements", a region left open raises "no end solution
  statement found";
* the region, its marker lines included, becomes the stub at the BEGIN line's indentation: in a code cell
  ``# YOUR CODE HERE`` and ``raise NotImplementedError()``, in a markdown cell ``YOUR ANSWER HERE``;
* with ``enforce_metadata=False`` (how it runs on notebooks without nbgrader's cell metadata, as ours are) nothing
  else changes in the cell.

Why the test does not require nbgrader itself: ``pip download nbgrader`` is 73 MB in 110 wheels (nbgrader's own is
11 MB, plus SQLAlchemy, Alembic, rapidfuzz and a pinned Jupyter server stack for its database and lab extension), to
use one 100-line preprocessor; pinning it beside the course's own JupyterLab would make CI's install heavier and its
resolution fragile. So ``release_cell`` reimplements the rules above, and where nbgrader is importable
(``pip install nbgrader``) ``test_the_reimplementation_is_nbgraders`` runs nbgrader's own ``ClearSolutions`` on every
solution workbook and on edge cases and requires the same output or the same error. It was run that way with
nbgrader 0.9.6 when this test was written.

Where the course deliberately differs (and the comparison normalises exactly these, nothing else):

* a region at top level gets ``# YOUR CODE HERE`` alone (nbgrader adds ``raise NotImplementedError()``, which would
  stop Run All at the first exercise); inside a function ``raise NotImplementedError`` (nbgrader: ``...()``: the
  same exception);
* a markdown region is dropped (nbgrader leaves ``YOUR ANSWER HERE``), and ``<!-- EXERCISE`` ... ``-->`` regions,
  hidden in the solved workbook, are shown in the exercise (nbgrader knows nothing of them: they stay hidden);
* the Colab badge of an exercise links the exercise (gpucourse.colab), not the solution.
"""
from __future__ import annotations

import copy
import glob
import os
import re

import nbformat
import pytest

from gpucourse import workbooks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLUTIONS = sorted(glob.glob(os.path.join(ROOT, "solutions", "*.ipynb")))
CODE_STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]  # ClearSolutions.code_stub["python"]
TEXT_STUB = ["YOUR ANSWER HERE"]  # ClearSolutions.text_stub


class NbgraderError(RuntimeError):
    pass


def release_cell(source: str, cell_type: str) -> str:
    """``source`` as nbgrader's ClearSolutions (enforce_metadata=False) releases it; NbgraderError where it raises."""
    stub = CODE_STUB if cell_type == "code" else TEXT_STUB
    out, inside = [], False
    for line in source.split("\n"):
        if "BEGIN SOLUTION" in line:
            if inside:
                raise NbgraderError("encountered nested begin solution statements")
            inside = True
            indent = re.match(r"\s*", line).group(0)
            out += [indent + s for s in stub]
        elif "END SOLUTION" in line:
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise NbgraderError("no end solution statement found")
    return "\n".join(out)


def release(nb):
    """The notebook as nbgrader's ClearSolutions releases it (cell by cell: the first error raises)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type in ("code", "markdown"):
            cell.source = release_cell(cell.source, cell.cell_type)
    nb.metadata.pop("celltoolbar", None)
    return nb


def course_form(released: str, cell_type: str) -> str:
    """nbgrader's release of a cell turned into the course's by the documented differences alone."""
    lines, out = released.split("\n"), []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if cell_type == "code" and stripped == CODE_STUB[1] and i and lines[i - 1].strip() == CODE_STUB[0]:
            if line != stripped:  # indented: the same exception, spelled as the course spells it
                out.append(line.replace(CODE_STUB[1], "raise NotImplementedError"))
            continue  # top level: the course's stub does not raise
        if cell_type == "markdown" and (stripped in TEXT_STUB or workbooks.MD_EXERCISE.match(line)
                                        or workbooks.MD_CLOSE.match(line)):
            continue
        out.append(line)
    return "\n".join(out)


def _badge_free(text: str) -> str:
    return re.sub(r"/blob/main/(solutions|exercises)/", "/blob/main/<dir>/", text)


def _exercise(solution_path: str):
    return nbformat.read(solution_path.replace(os.sep + "solutions" + os.sep, os.sep + "exercises" + os.sep),
                         as_version=4)


def test_the_rules_on_edge_cases():
    assert release_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION", "code") == \
        "def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert release_cell("a\n<!-- BEGIN SOLUTION -->\nsecret\n<!-- END SOLUTION -->\nb", "markdown") == \
        "a\nYOUR ANSWER HERE\nb"
    # Substring rules: a sentence that names the markers begins a region and never ends it on that line.
    with pytest.raises(NbgraderError, match="no end solution"):
        release_cell("write it between `### BEGIN SOLUTION` and `### END SOLUTION`", "markdown")
    with pytest.raises(NbgraderError, match="nested"):
        release_cell("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "code")


@pytest.mark.parametrize("path", SOLUTIONS, ids=os.path.basename)
def test_code_cells_released_by_nbgrader_are_the_exercises(path):
    """Every code cell of the solved workbook, released by nbgrader's rules, is the exercise's code cell once the
    documented stub differences are applied: the solution regions are exactly nbgrader's."""
    sol, ex = nbformat.read(path, as_version=4), _exercise(path)
    assert [c.cell_type for c in sol.cells] == [c.cell_type for c in ex.cells]
    for i, (s, e) in enumerate(zip(sol.cells, ex.cells)):
        if s.cell_type == "code":
            assert course_form(release_cell(s.source, "code"), "code") == e.source, f"{path}, cell {i}"


def _misread(nb) -> list:
    """Markdown cells where nbgrader finds a marker the course does not (a sentence naming the markers)."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        ours = sum(bool(workbooks.MD_BEGIN.match(line)) for line in cell.source.split("\n"))
        theirs = sum("BEGIN SOLUTION" in line for line in cell.source.split("\n"))
        if ours != theirs:
            found.append(i)
    return found


@pytest.mark.parametrize("path", SOLUTIONS, ids=os.path.basename)
def test_markdown_cells_released_by_nbgrader_are_the_exercises(path):
    sol, ex = nbformat.read(path, as_version=4), _exercise(path)
    misread = _misread(sol)
    for i, (s, e) in enumerate(zip(sol.cells, ex.cells)):
        if s.cell_type == "markdown" and i not in misread:
            assert _badge_free(course_form(release_cell(s.source, "markdown"), "markdown")) == _badge_free(e.source), \
                f"{path}, cell {i}"


def test_nbgrader_releases_every_workbook_without_error():
    """Found by this test (issue 21): the introductions of workbooks 01-05 and 07 named the markers in a sentence, and
    nbgrader, which matches substrings, stopped there with 'encountered nested begin solution statements'."""
    failing = []
    for path in SOLUTIONS:
        try:
            release(nbformat.read(path, as_version=4))
        except NbgraderError as exc:
            failing.append(f"{os.path.basename(path)} (markdown cells {_misread(nbformat.read(path, as_version=4))}):"
                           f" {exc}")
    assert not failing, "nbgrader would refuse: " + "; ".join(failing)


def test_the_reimplementation_is_nbgraders():
    """Where nbgrader is installed: its own ClearSolutions gives what release() gives, or raises where it raises."""
    pytest.importorskip("nbgrader", reason="nbgrader is not installed (pip install nbgrader): the module docstring "
                                           "says why the course does not require it")
    import logging

    from nbgrader.preprocessors import ClearSolutions

    logging.getLogger("ClearSolutions").disabled = True
    edge = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION\n\tz  # BEGIN SOLUTION here\n"
                                  "END SOLUTION too"),
        nbformat.v4.new_markdown_cell("text\n  <!-- BEGIN SOLUTION -->\nsecret\n<!-- END SOLUTION -->")])
    for nb in [edge] + [nbformat.read(p, as_version=4) for p in SOLUTIONS]:
        try:
            ours = release(nb)
        except NbgraderError as exc:
            with pytest.raises(RuntimeError, match=str(exc)):
                ClearSolutions(enforce_metadata=False).preprocess(copy.deepcopy(nb), {})
            continue
        theirs, _ = ClearSolutions(enforce_metadata=False).preprocess(copy.deepcopy(nb), {})
        assert [c.source for c in theirs.cells] == [c.source for c in ours.cells]
