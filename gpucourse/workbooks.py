"""Generate the learners' workbooks (exercises/) from the solved ones (solutions/), nbgrader style.

In a solution notebook, the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` are the answer. The
exercise notebook is the same notebook with each such region replaced by a stub, at the region's indentation:
``# YOUR CODE HERE`` plus ``raise NotImplementedError`` inside a function (so ``check`` reports "not implemented yet"),
``# YOUR CODE HERE`` alone at top level (so the notebook still runs top to bottom). Outputs and execution counts are
removed, and the Colab badge and install cell are (re)written for the exercise's own path (:mod:`gpucourse.colab`).
``python -m gpucourse.workbooks`` regenerates every exercise; ``--check`` only reports what is out of sync
or leaks solution code, and exits 1 if anything is.

Markdown cells have regions too, as HTML comments (invisible where the notebook is rendered): lines between
``<!-- BEGIN SOLUTION -->`` and ``<!-- END SOLUTION -->`` are the solved workbook's alone and are dropped from the
exercise; the lines inside ``<!-- EXERCISE`` ... ``-->`` are hidden in the solved workbook and shown in the exercise.
So a workbook's introduction can say "solved" in one and "fill in" in the other, and :func:`says_solved` checks that
no exercise says it is solved.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

BEGIN = re.compile(r"^(\s*)###\s*BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*###\s*END SOLUTION\s*$")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


MD_BEGIN = re.compile(r"^\s*<!--\s*BEGIN SOLUTION\s*-->\s*$")
MD_END = re.compile(r"^\s*<!--\s*END SOLUTION\s*-->\s*$")
MD_EXERCISE = re.compile(r"^\s*<!--\s*EXERCISE\s*$")
MD_CLOSE = re.compile(r"^\s*-->\s*$")
# What an exercise workbook must never say about itself.
SOLVED_WORDS = re.compile(r"(?i)\bsolved\b|\bsolution below\b|\bsolutions? (?:live|lives) here\b|BEGIN SOLUTION")


class WorkbookError(ValueError):
    """A solution notebook whose BEGIN/END SOLUTION markers do not pair up."""


def code_cells(path: str) -> list:
    """The source of each code cell of the notebook at ``path``, in order. Plain JSON, no nbformat: the grader's
    worker and the GPU machine read notebooks without the Jupyter packages."""
    import json

    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    return ["".join(c.get("source", "")) if isinstance(c.get("source", ""), list) else str(c.get("source", ""))
            for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def strip_source(source: str, where: str = "cell") -> str:
    """The source with every solution region replaced by its stub."""
    out, inside, indent = [], False, ""
    for n, line in enumerate(source.splitlines(), 1):
        begin = BEGIN.match(line)
        if begin:
            if inside:
                raise WorkbookError(f"{where}, line {n}: BEGIN SOLUTION inside another solution region")
            inside, indent = True, begin.group(1)
            out.append(f"{indent}# YOUR CODE HERE")
            if indent:
                out.append(f"{indent}raise NotImplementedError")
        elif END.match(line):
            if not inside:
                raise WorkbookError(f"{where}, line {n}: END SOLUTION without BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise WorkbookError(f"{where}: BEGIN SOLUTION without END SOLUTION")
    return "\n".join(out)


def strip_markdown(source: str, where: str = "cell") -> str:
    """A markdown cell as the exercise shows it: solution regions dropped, exercise-only regions shown."""
    out, state = [], None  # None, "solution" or "exercise"
    for n, line in enumerate(source.splitlines(), 1):
        if state is None and MD_BEGIN.match(line):
            state = "solution"
        elif state is None and MD_EXERCISE.match(line):
            state = "exercise"
        elif state == "solution" and MD_END.match(line):
            state = None
        elif state == "exercise" and MD_CLOSE.match(line):
            state = None
        elif MD_BEGIN.match(line) or MD_END.match(line) or MD_EXERCISE.match(line):
            raise WorkbookError(f"{where}, line {n}: markdown region markers do not pair up")
        elif state != "solution":
            out.append(line)
    if state is not None:
        raise WorkbookError(f"{where}: a markdown {state} region is not closed")
    return "\n".join(out)


def says_solved(exercise_text: str) -> list:
    """Lines of an exercise notebook's markdown that call it solved or point at a solution in it."""
    import json

    cells = json.loads(exercise_text).get("cells", [])
    return [line.strip() for c in cells if c.get("cell_type") == "markdown"
            for line in "".join(c.get("source", "")).splitlines() if SOLVED_WORDS.search(line)]


def solution_lines(source: str) -> list:
    """The non-trivial lines inside solution regions (what must never appear in an exercise)."""
    lines, inside = [], False
    for line in source.splitlines():
        if BEGIN.match(line):
            inside = True
        elif END.match(line):
            inside = False
        elif inside and line.strip() and not line.strip().startswith("#") and len(line.strip()) > 8:
            lines.append(line.strip())
    return lines


def make_exercise(nb, name: str = "notebook"):
    """A new notebook: ``nb`` with solutions stripped and outputs cleared."""
    import copy

    ex = copy.deepcopy(nb)
    for i, cell in enumerate(ex.cells):
        if cell.cell_type == "code":
            cell.source = strip_source(cell.source, f"{name}, cell {i}")
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown":
            cell.source = strip_markdown(cell.source, f"{name}, cell {i}")
        cell.metadata.pop("execution", None)
    return ex


def pairs(root: str = ROOT) -> list:
    """(solution path, exercise path) for every solutions/NN_topic.ipynb."""
    sol_dir = os.path.join(root, "solutions")
    if not os.path.isdir(sol_dir):
        return []
    return [(os.path.join(sol_dir, f), os.path.join(root, "exercises", f))
            for f in sorted(os.listdir(sol_dir)) if f.endswith(".ipynb")]


def render(solution_path: str) -> str:
    import nbformat

    from . import colab

    nb = nbformat.read(solution_path, as_version=4)
    ex = make_exercise(nb, os.path.basename(solution_path))
    colab.apply(ex, "exercises/" + os.path.basename(solution_path), as_lines=False)  # the badge opens the exercise
    return nbformat.writes(ex) + "\n"


def leaks(solution_path: str, exercise_text: str) -> list:
    """Solution lines found in an exercise notebook's code cells (an empty list is the goal)."""
    import nbformat

    sol = nbformat.read(solution_path, as_version=4)
    ex = nbformat.reads(exercise_text, as_version=4)
    code = "\n".join(c.source for c in ex.cells if c.cell_type == "code")
    exercise_lines = {line.strip() for line in code.splitlines()}  # solution_lines are stripped too
    found = [line for c in sol.cells if c.cell_type == "code" for line in solution_lines(c.source)
             if line in exercise_lines]
    if "BEGIN SOLUTION" in code or "END SOLUTION" in code:
        found.append("a BEGIN/END SOLUTION marker")
    return found


def out_of_sync(root: str = ROOT) -> list:
    """Problems, one line each: exercises missing, stale, leaking solution code, or without a solution."""
    problems = []
    for sol, ex in pairs(root):
        rel = os.path.relpath(ex, root)
        if not os.path.exists(ex):
            problems.append(f"{rel} is missing")
            continue
        with open(ex) as f:
            text = f.read()
        if text != render(sol):
            problems.append(f"{rel} is out of date with {os.path.relpath(sol, root)}")
        for line in leaks(sol, text):
            problems.append(f"{rel} leaks solution code: {line!r}")
        for line in says_solved(text):
            problems.append(f"{rel} says it is solved: {line!r} (wrap it in <!-- BEGIN SOLUTION --> ... "
                            f"<!-- END SOLUTION --> in {os.path.relpath(sol, root)})")
    ex_dir = os.path.join(root, "exercises")
    if os.path.isdir(ex_dir):
        solved = {os.path.basename(s) for s, _ in pairs(root)}
        for f in sorted(os.listdir(ex_dir)):
            if f.endswith(".ipynb") and f not in solved:
                problems.append(f"exercises/{f} has no solutions/{f} (exercises are generated, never edited)")
    return problems


def regenerate(root: str = ROOT) -> list:
    """Write every exercise notebook; returns the paths written."""
    written = []
    for sol, ex in pairs(root):
        os.makedirs(os.path.dirname(ex), exist_ok=True)
        text = render(sol)
        old = open(ex).read() if os.path.exists(ex) else None
        if text != old:
            with open(ex, "w") as f:
                f.write(text)
            written.append(ex)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpucourse.workbooks",
                                 description="Regenerate exercises/ from solutions/ (strip BEGIN/END SOLUTION).")
    ap.add_argument("--check", action="store_true", help="only report exercises that are out of sync; exit 1 if any")
    ap.add_argument("--root", default=ROOT, help="the repository root (default: this checkout)")
    args = ap.parse_args(argv)
    try:
        if args.check:
            problems = out_of_sync(args.root)
            for p in problems:
                print(p, file=sys.stderr)
            if problems:
                print("run `make regenerate` (python -m gpucourse.workbooks) to fix.", file=sys.stderr)
            return 1 if problems else 0
        written = regenerate(args.root)
    except WorkbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for p in written:
        print(f"wrote {os.path.relpath(p, args.root)}")
    print(f"{len(pairs(args.root))} workbook(s) in sync.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
