"""Workbooks: exercises/ is generated from solutions/, in sync, leak-free, without outputs, and runnable unsolved."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest

from gpucourse import colab, workbooks

PAIRS = workbooks.pairs()
IDS = [os.path.basename(s) for s, _ in PAIRS]


def test_there_are_workbooks():
    assert "00_start_here.ipynb" in IDS


def test_exercises_in_sync_with_solutions():
    problems = workbooks.out_of_sync()
    assert problems == [], "\n".join(problems) + "\nrun `make regenerate`"


def test_check_command_detects_a_stale_exercise(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    sol, _ = PAIRS[0]
    (tmp_path / "solutions" / "00_x.ipynb").write_text(open(sol).read())
    cmd = [sys.executable, "-m", "gpucourse.workbooks", "--root", str(tmp_path)]
    assert subprocess.run(cmd + ["--check"], capture_output=True).returncode == 1  # missing
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    assert subprocess.run(cmd + ["--check"], capture_output=True).returncode == 0
    nb = json.loads((tmp_path / "exercises" / "00_x.ipynb").read_text())
    nb["cells"][0]["source"] = "edited by hand"
    (tmp_path / "exercises" / "00_x.ipynb").write_text(json.dumps(nb))
    proc = subprocess.run(cmd + ["--check"], capture_output=True, text=True)
    assert proc.returncode == 1 and "out of date" in proc.stderr


@pytest.mark.parametrize("sol,ex", PAIRS, ids=IDS)
def test_no_solution_code_leaks(sol, ex):
    with open(ex) as f:
        assert workbooks.leaks(sol, f.read()) == []
    nb = nbformat.read(sol, as_version=4)
    assert any("BEGIN SOLUTION" in c.source for c in nb.cells), "a solution workbook without solution regions"


def test_leaks_finds_solution_lines_whatever_their_indentation(tmp_path):
    sol = tmp_path / "sol.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "def f(x):\n    ### BEGIN SOLUTION\n    return secret_formula(x)\n    ### END SOLUTION\n")]), sol)

    def exercise(source):
        return nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]))

    assert workbooks.leaks(str(sol), exercise("def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError")) == []
    for pasted in ("def f(x):\n    return secret_formula(x)", "def f(x):\n  return secret_formula(x)  ",
                   "return secret_formula(x)"):
        assert workbooks.leaks(str(sol), exercise(pasted)) == ["return secret_formula(x)"], pasted


@pytest.mark.parametrize("sol,ex", PAIRS, ids=IDS)
def test_exercises_have_no_outputs(sol, ex):
    nb = nbformat.read(ex, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.parametrize("sol,ex", PAIRS, ids=IDS)
def test_first_code_cells_install_then_set_up_gpucourse(sol, ex):
    """The Colab install cell (tests/test_colab.py checks its text), then ``import gpucourse`` and setup()."""
    for path in (sol, ex):
        install, first = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"][:2]
        assert install.get("id") == "colab-install", path
        lines = [ln for ln in first.source.splitlines() if ln.strip()]
        assert lines[:2] == ["import gpucourse", "gpucourse.setup()"], path


def test_workbook_points_to_its_solutions():
    text = "".join(c.source for c in nbformat.read(PAIRS[0][1], as_version=4).cells if c.cell_type == "markdown")
    assert "solutions/00_start_here.ipynb" in text


def test_strip_source_stubs():
    src = "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n"
    assert workbooks.strip_source(src) == "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError"
    top = "a = 1\n### BEGIN SOLUTION\nb = secret()\n### END SOLUTION\nprint(a)"
    assert workbooks.strip_source(top) == "a = 1\n# YOUR CODE HERE\nprint(a)"
    with pytest.raises(workbooks.WorkbookError, match="without END"):
        workbooks.strip_source("### BEGIN SOLUTION\nx = 1\n")
    with pytest.raises(workbooks.WorkbookError, match="without BEGIN"):
        workbooks.strip_source("x = 1\n### END SOLUTION\n")


def test_unsolved_workbook_runs_and_solved_one_passes(tmp_path):
    """Graded as notebooks: the exercise runs top to bottom and is "not implemented yet"; the solution passes."""
    sol, ex = [p for p in PAIRS if p[0].endswith("00_start_here.ipynb")][0]
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", "relu", ex, sol, "--jobs", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ex_result, sol_result = json.loads(out.read_text())["results"]
    assert ex_result["status"] == "error" and "not implemented yet" in ex_result["message"]
    assert sol_result["status"] == "passed" and sol_result["score"] == 1.0


@pytest.mark.parametrize("sol,ex", PAIRS, ids=IDS)
def test_no_exercise_says_it_is_solved(sol, ex):
    with open(ex) as f:
        assert workbooks.says_solved(f.read()) == []


def test_markdown_regions_split_the_solved_text_from_the_exercises(tmp_path):
    md = ("# 09 · Something — workbook\n<!-- BEGIN SOLUTION -->\nThis is the solved workbook.\n<!-- END SOLUTION -->\n"
          "<!-- EXERCISE\nFill in each function.\n-->\nThe end.")
    sol = tmp_path / "solutions" / "09_x.ipynb"
    sol.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(md), nbformat.v4.new_code_cell(
        "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n")]), sol)
    text = workbooks.render(str(sol))
    shown = nbformat.reads(text, as_version=4).cells[0].source
    assert shown == ("# 09 · Something — workbook\n\n" + colab.badge("exercises/09_x.ipynb") +
                     "\n\nFill in each function.\nThe end.")
    assert workbooks.says_solved(text) == []
    # Without the regions the exercise would say it is solved, and the check says which line.
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("This is the solved workbook.")]),
                   sol)
    assert workbooks.says_solved(workbooks.render(str(sol))) == ["This is the solved workbook."]
    for unpaired in ("<!-- BEGIN SOLUTION -->\nx", "x\n<!-- END SOLUTION -->", "<!-- EXERCISE\nx"):
        with pytest.raises(workbooks.WorkbookError):
            workbooks.strip_markdown(unpaired)
