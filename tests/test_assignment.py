"""A whole assignment graded at once (issue 35, item 4): ``gpucourse grade WORKBOOK COURSE`` (or ``--assignment
WORKBOOK COURSE``) grades every exercise of the workbook from each student's notebook and writes one gradebook, a
row per student with each exercise's points and the total; a re-grade of one student updates that row in place."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from gpucourse.grading import cli, gradebook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKBOOK = "09_compile_profiling"  # two exercises, both graded in seconds in CPU mode
EXERCISES = ["fused_rmsnorm_residual", "read_the_profile"]


def _grade(args, **kw):
    return subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", *args], capture_output=True, text=True,
                          timeout=600, **kw)


def _course(tmp_path):
    """alice hands in the solved workbook, bob the unsolved one, carol nothing."""
    sub = tmp_path / "course" / "submitted"
    for student, source in (("alice", "solutions"), ("bob", "exercises")):
        (sub / student / WORKBOOK).mkdir(parents=True)
        shutil.copy(os.path.join(ROOT, source, WORKBOOK + ".ipynb"), sub / student / WORKBOOK)
    (sub / "carol" / WORKBOOK).mkdir(parents=True)
    return tmp_path / "course"


def _rows(path):
    return {r["student"]: r for r in csv.DictReader(io.StringIO(path.read_text(), newline=""))}


def test_a_workbook_names_its_exercises_in_the_workbooks_order():
    books = cli.workbooks()
    assert books["05_triton"] == ["vector_add", "softmax", "matmul"]
    assert books[WORKBOOK] == EXERCISES
    assert sorted(ex for ids in books.values() for ex in ids) == sorted(
        __import__("gpucourse.grading.exercise", fromlist=["all_ids"]).all_ids())


@pytest.mark.parametrize("argv, expected", [
    (["vector_add", "a.py"], (["vector_add"], ["a.py"], None)),
    (["05_triton", "course"], (["vector_add", "softmax", "matmul"], ["course"], "05_triton")),
])
def test_the_command_line_names_an_exercise_or_a_workbook(argv, expected):
    args = cli._parser().parse_args(argv)
    assert cli._target(args) == expected


def test_assignment_option_with_only_a_course_is_the_whole_workbook(tmp_path):
    args = cli._parser().parse_args(["--assignment", "05_triton", str(tmp_path)])
    assert cli._target(args) == (["vector_add", "softmax", "matmul"], [str(tmp_path)], "05_triton")


def test_unknown_target_and_missing_submissions_are_usage_errors(capsys):
    for argv, said in ((["nope", "a.py"], "unknown exercise 'nope'; known exercises: "),
                       (["vector_add"], "no SUBMISSION given: name a file, a folder or an nbgrader course"),
                       (["05_triton"], "no SUBMISSION given for assignment 05_triton")):
        assert cli._target(cli._parser().parse_args(argv)) == 2
        err = capsys.readouterr().err
        assert said in err, err
    cli._target(cli._parser().parse_args(["nope", "a.py"]))
    assert "or a workbook, graded whole: 00_start_here, 01_cpu_vs_gpu_timing" in capsys.readouterr().err


def test_a_gpu_only_workbook_is_refused_in_cpu_mode(tmp_path, capsys):
    from gpucourse import device

    if device.on_gpu():
        pytest.skip("a GPU is present: workbook 04 can be graded here")
    rc = cli.main(["04_cuda_reduction", str(tmp_path)])
    assert rc == 2
    assert "exercise 'block_sum' needs a CUDA GPU; this machine runs in CPU mode" in capsys.readouterr().err


def test_assignment_book_sums_points_and_keeps_each_exercises_message():
    entries = [gradebook.Entry("alice", "/c/a.ipynb", WORKBOOK), gradebook.Entry("bob", "/c/b.ipynb", WORKBOOK),
               gradebook.Entry("carol", None, WORKBOOK, status="missing", problem="nothing handed in")]

    def report(ex, bob):
        return {"exercise": ex, "results": [
            {"submission": "/c/a.ipynb", "status": "passed", "score": 1.0, "message": "all passed", "flags": []},
            {"submission": "/c/b.ipynb", "status": bob[0], "score": bob[1], "message": bob[2], "flags": bob[3]}]}

    book = gradebook.assignment_book(WORKBOOK, [
        ("fused_rmsnorm_residual", entries, report("fused_rmsnorm_residual", ("failed", 0.5, "4 of 8 cases failed",
                                                                               ["calls torch"]))),
        ("read_the_profile", entries, report("read_the_profile", ("passed", 1.0, "all passed", [])))], 10)
    rows = {r["student"]: r for r in book.table}
    assert book.columns == gradebook.COLUMNS + ["fused_rmsnorm_residual_points", "read_the_profile_points"]
    assert (rows["alice"]["points"], rows["alice"]["max_points"], rows["alice"]["status"]) == (20, 20, "passed")
    assert (rows["bob"]["points"], rows["bob"]["status"]) == (15, "failed")
    assert rows["bob"]["fused_rmsnorm_residual_points"] == 5 and rows["bob"]["read_the_profile_points"] == 10
    assert rows["bob"]["message"] == ("fused_rmsnorm_residual failed 5/10; read_the_profile passed 10/10 -- "
                                      "fused_rmsnorm_residual: 4 of 8 cases failed")
    assert rows["bob"]["flags"] == "fused_rmsnorm_residual: calls torch"
    assert rows["carol"]["points"] is None and rows["carol"]["status"] == "missing"
    assert rows["carol"]["message"] == "nothing handed in"  # once, not once per exercise


def test_instructor_grades_a_whole_assignment_then_regrades_one_student(tmp_path):
    course = _course(tmp_path)
    book, fb = tmp_path / "grades.csv", tmp_path / "feedback"
    proc = _grade([WORKBOOK, str(course), "--gradebook", str(book), "--feedback", str(fb), "--jobs", "2",
                   "--allow-process-isolation"])
    assert proc.returncode == 0, proc.stderr
    assert f"assignment {WORKBOOK}: 2 exercises (fused_rmsnorm_residual, read_the_profile)" in proc.stderr
    assert "carol: no .ipynb or .py file in its 09_compile_profiling folder" in proc.stderr
    assert proc.stderr.count("carol: no .ipynb") == 1  # the notes are said once for the assignment
    assert "== fused_rmsnorm_residual" in proc.stdout and "== read_the_profile" in proc.stdout
    rows = _rows(book)
    assert list(csv.reader(io.StringIO(book.read_text())))[0] == gradebook.assignment_columns(EXERCISES)
    assert (rows["alice"]["points"], rows["alice"]["max_points"], rows["alice"]["status"]) == ("200", "200", "passed")
    assert (rows["bob"]["points"], rows["bob"]["status"]) == ("0", "error")
    assert "fused_rmsnorm_residual: fused_rmsnorm_residual raises NotImplementedError" in rows["bob"]["message"]
    assert (rows["carol"]["points"], rows["carol"]["status"]) == ("", "missing")
    env = json.loads((tmp_path / "grades.env.json").read_text())
    assert env["exercise"] == WORKBOOK and env["exercises"] == EXERCISES and env["students"] == 3
    for ex in EXERCISES:  # each exercise's summary and feedback, named after it
        assert (tmp_path / f"grades-summary-{ex}.md").exists()
        assert (fb / "alice" / WORKBOOK / f"{ex}.html").exists()
    # bob hands in the solved workbook late: his row is re-graded in place, the others kept byte for byte.
    before = book.read_bytes().split(b"\r\n")
    shutil.copy(os.path.join(ROOT, "solutions", WORKBOOK + ".ipynb"), course / "submitted" / "bob" / WORKBOOK)
    proc = _grade(["--assignment", WORKBOOK, str(course), "--student", "bob", "--gradebook", str(book), "--jobs", "2",
                   "--allow-process-isolation"])
    assert proc.returncode == 0, proc.stderr
    assert "updated bob; 2 other rows kept as they were" in proc.stderr
    after = book.read_bytes().split(b"\r\n")
    assert [after[0], after[1], after[3]] == [before[0], before[1], before[3]]
    assert _rows(book)["bob"]["points"] == "200"
    assert json.loads((tmp_path / "grades.env.json").read_text())["regrades"][0]["students"] == ["bob"]
    # One exercise's batch cannot be written into the assignment's gradebook: other columns.
    proc = _grade(["read_the_profile", str(course), "--student", "bob", "--gradebook", str(book),
                   "--allow-process-isolation"])
    assert proc.returncode == 2 and "exists and is not a gradebook this command writes" in proc.stderr
    assert "[1/" not in proc.stderr  # refused before grading
