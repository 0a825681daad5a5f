"""The answer to a workbook exercise is never printed in its lesson.

For every lesson NN with a solved workbook (solutions/NN_*.ipynb), no solution region's code (the lines between
``### BEGIN SOLUTION`` and ``### END SOLUTION``) may appear in notebooks/NN_*.ipynb: neither in a cell's source
(code or markdown) nor in a cell's saved printed output.

Lines are compared normalised: comments and all whitespace removed; lines shorter than MIN_CHARS after that
(``return out``, ``else:``, ``)``) are ignored, since any two programs share them. A region fails when

- it shares a contiguous run of RUN or more such lines with one lesson cell (its source or its output), or
- it has at least MIN_REGION distinct such lines and more than SHARE of them occur anywhere in the lesson.

Lines a lesson teaches on purpose and the answer needs too (TAUGHT, each with its reason) are left out for that
lesson. The message names the lesson, the region's first line and the shared lines. The detector itself is tested on tiny
synthetic notebooks below, so this test can fail (a copied region is caught, an unrelated one is not).
"""
from __future__ import annotations

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIN_CHARS = 12
RUN = 3
MIN_REGION = 5
SHARE = 0.40
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def _strip_comment(line: str) -> str:
    """The line without its ``#`` comment (a ``#`` inside a string literal is kept)."""
    quote = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
        i += 1
    return line


def normalise(line: str) -> str:
    """Comments and all whitespace removed; "" when what is left is shorter than MIN_CHARS."""
    text = re.sub(r"\s+", "", _strip_comment(line))
    return text if len(text) >= MIN_CHARS else ""


def _lines(text: str) -> list[str]:
    return [n for n in (normalise(line) for line in text.splitlines()) if n]


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else (source or "")


def solution_regions(nb: dict) -> list[tuple[str, list[str]]]:
    """(first line of the region, its normalised lines) for each solution region of a solved workbook's code cells."""
    regions = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        inside, first, body = False, "", []
        for line in _text(cell["source"]).splitlines():
            if line.strip().startswith(BEGIN):
                inside, first, body = True, "", []
            elif line.strip().startswith(END) and inside:
                inside = False
                lines = _lines("\n".join(body))
                if lines:
                    regions.append((first, lines))
            elif inside:
                body.append(line)
                if not first and line.strip():
                    first = line.strip()
    return regions


def lesson_texts(nb: dict) -> list[tuple[str, list[str]]]:
    """(where, normalised lines) for every cell's source and every cell's saved output of a lesson notebook."""
    texts = []
    for i, cell in enumerate(nb["cells"]):
        texts.append((f"cell {i} source", _lines(_text(cell.get("source", "")))))
        for output in cell.get("outputs", []) or []:
            parts = [_text(output.get("text", ""))]
            for mime, data in (output.get("data") or {}).items():
                if mime.startswith("text/") and mime != "text/html":
                    parts.append(_text(data))
            if output.get("traceback"):
                parts.append("\n".join(output["traceback"]))
            texts.append((f"cell {i} output", _lines("\n".join(parts))))
    return texts


def _longest_run(a: list[str], b: list[str]) -> list[str]:
    """The longest contiguous run of lines that a and b share (longest common substring over lines)."""
    best, best_end = 0, 0
    prev = [0] * (len(b) + 1)
    for i in range(1, len(a) + 1):
        cur = [0] * (len(b) + 1)
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                cur[j] = prev[j - 1] + 1
                if cur[j] > best:
                    best, best_end = cur[j], i
        prev = cur
    return a[best_end - best:best_end]


# Lines a lesson teaches on purpose and its workbook's answer necessarily uses too: left out of the comparison for
# that lesson only, each with the reason. Anything else shared still fails.
TAUGHT = {
    "01_cpu_vs_gpu_timing": ("the synchronize / read the host clock / synchronize pattern is what lesson 01 teaches; "
                             "time_gpu's answer is the warm-up, the repeats and the median around it",
                             {"gpucourse.synchronize()", "t0=time.perf_counter()"}),
    "04_cuda_reduction": ("the float4 grid-stride loop is step 5 of lesson 04's ladder; block_sum's answer is the "
                          "misaligned head and tail, the block reduction and the binding around it",
                          {"for(longlongi=tid;i<n4;i+=stride){", "float4q=x4[i];", "acc+=(q.x+q.y)+(q.z+q.w);"}),
}


def find_copies(lesson_name: str, lesson_nb: dict, solved_nb: dict) -> list[str]:
    """One message per solution region of solved_nb whose code appears in lesson_nb (see the module docstring)."""
    texts = lesson_texts(lesson_nb)
    everywhere = {line for _, lines in texts for line in lines}
    taught = TAUGHT.get(lesson_name.removesuffix(".ipynb"), ("", set()))[1]
    problems = []
    for first, lines in solution_regions(solved_nb):
        lines = [line for line in lines if line not in taught]
        for where, cell_lines in texts:
            run = _longest_run(lines, cell_lines)
            if len(run) >= RUN:
                problems.append(f"{lesson_name}: the solution region starting {first!r} shares {len(run)} "
                                f"consecutive lines with its {where}:\n    " + "\n    ".join(run))
                break
        else:
            distinct = list(dict.fromkeys(lines))
            shared = [line for line in distinct if line in everywhere]
            if len(distinct) >= MIN_REGION and len(shared) > SHARE * len(distinct):
                problems.append(f"{lesson_name}: {len(shared)} of the {len(distinct)} distinct lines of the solution "
                                f"region starting {first!r} occur in the lesson:\n    " + "\n    ".join(shared))
    return problems


def _pairs():
    for solved in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        lessons = sorted((ROOT / "notebooks").glob(solved.name[:3] + "*.ipynb"))
        if lessons:
            yield pytest.param(lessons[0], solved, id=solved.name[:2])


@pytest.mark.parametrize("lesson, solved", list(_pairs()))
def test_lesson_does_not_print_its_workbooks_answers(lesson, solved):
    problems = find_copies(lesson.name, json.loads(lesson.read_text()), json.loads(solved.read_text()))
    assert not problems, "a lesson shows the answer to its workbook:\n" + "\n".join(problems)


def test_taught_lines_are_in_their_lesson_and_its_workbook():
    """The allowance cannot rot: every line TAUGHT lets through is in that lesson and in its workbook's answer."""
    for stem, (why, lines) in TAUGHT.items():
        assert why and lines
        lesson = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
        solved = json.loads((ROOT / "solutions" / f"{stem}.ipynb").read_text())
        in_lesson = {line for _, ls in lesson_texts(lesson) for line in ls}
        in_answer = {line for _, ls in solution_regions(solved) for line in ls}
        assert lines <= in_lesson and lines <= in_answer, (stem, lines - in_lesson, lines - in_answer)


# --- the detector on tiny synthetic notebooks ------------------------------------------------------------------


def _nb(*cells):
    return {"cells": list(cells)}


def _code(src: str, output: str | None = None):
    cell = {"cell_type": "code", "source": src.splitlines(keepends=True), "outputs": []}
    if output is not None:
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": output}]
    return cell


SOLVED = _nb(_code("""def scale_add(x, y, alpha):
    ### BEGIN SOLUTION
    out = torch.empty_like(x)  # the output
    grid = (triton.cdiv(x.numel(), 1024),)
    scale_add_kernel[grid](x, y, out, x.numel(), alpha, BLOCK=1024)
    return out
    ### END SOLUTION
"""))


def test_detector_catches_a_copied_region_even_reformatted():
    lesson = _nb(_code("""# the lesson's version
out=torch.empty_like(x)
grid = ( triton.cdiv(x.numel(), 1024), )   # one program per block
scale_add_kernel[grid](x, y, out, x.numel(), alpha, BLOCK=1024)
"""))
    problems = find_copies("99_synthetic.ipynb", lesson, SOLVED)
    assert len(problems) == 1
    assert "99_synthetic.ipynb" in problems[0] and "out = torch.empty_like(x)" in problems[0]
    assert "scale_add_kernel[grid](x,y,out,x.numel(),alpha,BLOCK=1024)" in problems[0]


def test_detector_catches_a_region_in_a_printed_output():
    lesson = _nb(_code("print(inspect.getsource(f))", output="""out = torch.empty_like(x)
grid = (triton.cdiv(x.numel(), 1024),)
scale_add_kernel[grid](x, y, out, x.numel(), alpha, BLOCK=1024)
"""))
    assert find_copies("99_synthetic.ipynb", lesson, SOLVED)


def test_detector_catches_scattered_lines_of_a_long_region():
    solved = _nb(_code("""### BEGIN SOLUTION
first_long_line = 1
second_long_line = 2
third_long_line = 3
fourth_long_line = 4
fifth_long_line = 5
### END SOLUTION
"""))
    lesson = _nb(_code("first_long_line = 1\nunrelated_thing = 0\nthird_long_line = 3"),
                 _code("fifth_long_line = 5"))
    problems = find_copies("99_synthetic.ipynb", lesson, solved)
    assert len(problems) == 1 and "3 of the 5 distinct lines" in problems[0]


def test_detector_passes_an_unrelated_lesson():
    lesson = _nb(_code("""out = torch.empty_like(x)  # short lines and one shared line are not a copy
y = x + 1
relu_kernel[grid](x, out, x.numel(), BLOCK=1024)
""", output="out = torch.empty_like(x)\n"))
    assert find_copies("99_synthetic.ipynb", lesson, SOLVED) == []
