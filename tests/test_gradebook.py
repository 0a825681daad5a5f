"""Who handed in what (gpucourse/grading/gradebook.py) and the instructor's command line around it: an nbgrader
course directory and a folder of files read as students, the mistakes an instructor meets said clearly (no
submissions, a student with two files, a non-notebook in submitted/, several assignments), the per-student gradebook
with the environment once per batch, the leaderboard page, and names from hostile paths escaped."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from gpucourse.grading import gradebook

HERE = os.path.dirname(os.path.abspath(__file__))
KNOWN = os.path.join(HERE, "submissions", "vector_add")
HOSTILE = '=HYPERLINK("http:__evil","x")'  # a student folder an attacker names (no "/" in a file name)


def _put(root, rel, known="right_basic.py", text=None):
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if text is not None:
        with open(path, "w") as f:
            f.write(text)
    else:
        shutil.copy(os.path.join(KNOWN, known), path)
    return path


def _grade(args, **kw):
    return subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", *args], capture_output=True, text=True,
                          **kw)


def test_nbgrader_layout_one_entry_per_student(tmp_path):
    sub = tmp_path / "course" / "submitted"
    a = _put(sub, "alice/05_triton/05_triton.ipynb", text="{}")
    _put(sub, "alice/05_triton/timestamp.txt", text="2026-11-25 07:00:00")  # nbgrader's: silently skipped
    _put(sub, "alice/05_triton/.ipynb_checkpoints/05_triton-checkpoint.ipynb", text="{}")
    _put(sub, "alice/00_start_here/00_start_here.ipynb", text="{}")  # another assignment: not this batch's
    b1 = _put(sub, "bob/05_triton/05_triton.ipynb", text="{}")
    _put(sub, "bob/05_triton/scratch.py", text="")  # the released name wins, the other is noted
    _put(sub, "bob/05_triton/data.csv", text="1,2")
    c1 = _put(sub, "carol/05_triton/mine.py", text="")
    c2 = _put(sub, "carol/05_triton/mine_v2.py", text="")
    _put(sub, "dave/05_triton/answers.pdf", text="%PDF")
    os.makedirs(sub / "erin")
    _put(sub, "readme.txt", text="stray")
    # The course directory and its submitted/ folder read alike; the assignment is the exercise's workbook.
    assert gradebook.nbgrader_root(str(tmp_path / "course")) == str(sub)
    assert gradebook.nbgrader_root(str(sub)) == str(sub)
    assert gradebook.nbgrader_root(str(tmp_path)) is None
    assert gradebook.workbook_of("vector_add") == "05_triton"
    entries = gradebook.collect_nbgrader(str(sub), "vector_add")
    got = {e.student: (e.path, e.status) for e in entries}
    assert got == {"alice": (a, ""), "bob": (b1, ""), "carol": (None, "ambiguous"), "dave": (None, "missing"),
                   "erin": (None, "missing")}
    by = {e.student: e for e in entries}
    assert by["carol"].candidates == [c1, c2] and "2 files" in by["carol"].problem
    assert "mine.py, mine_v2.py" in by["carol"].problem and "keep one" in by["carol"].problem
    assert "found: answers.pdf" in by["dave"].problem
    assert "nothing handed in" in by["erin"].problem
    notes = " | ".join(n for e in entries for n in e.notes)
    assert "bob/05_triton/data.csv: not a notebook or .py file" in notes
    assert "bob/05_triton/scratch.py: not graded (the released workbook 05_triton.ipynb is)" in notes
    assert "readme.txt: a file directly in submitted/" in notes
    assert "timestamp" not in notes and "checkpoint" not in notes
    assert gradebook.to_grade(entries) == [a, b1, c1, c2]
    with pytest.raises(gradebook.LayoutError, match="no student handed in assignment 'nope'.*05_triton"):
        gradebook.collect_nbgrader(str(sub), "vector_add", "nope")
    other = gradebook.collect_nbgrader(str(sub), "vector_add", "00_start_here")
    assert {e.assignment for e in other} == {"00_start_here"}


def test_nbgrader_layout_mistakes_are_layout_errors(tmp_path):
    empty = tmp_path / "empty" / "submitted"
    os.makedirs(empty)
    with pytest.raises(gradebook.LayoutError, match="no student folders"):
        gradebook.collect_nbgrader(str(empty), "vector_add")
    flat = tmp_path / "flat" / "submitted"
    _put(flat, "alice/notebook.ipynb", text="{}")  # files straight in the student's folder: no assignment folder
    with pytest.raises(gradebook.LayoutError, match="no assignment folders"):
        gradebook.collect_nbgrader(str(flat), "vector_add")
    several = tmp_path / "several" / "submitted"
    _put(several, "alice/hw1/a.ipynb", text="{}")
    _put(several, "bob/hw2/a.ipynb", text="{}")
    with pytest.raises(gradebook.LayoutError, match=r"several assignments \(hw1, hw2\).*--assignment"):
        gradebook.collect_nbgrader(str(several), "vector_add")
    only = tmp_path / "only" / "submitted"
    _put(only, "alice/week1/a.ipynb", text="{}")
    assert [e.assignment for e in gradebook.collect_nbgrader(str(only), "vector_add")] == ["week1"]


def test_folder_of_files_students(tmp_path):
    _put(tmp_path, "alice.ipynb", text="{}")
    _put(tmp_path, "bob/workbook.py", text="")
    _put(tmp_path, "carol/a.py", text="")
    _put(tmp_path, "carol/b.ipynb", text="{}")
    _put(tmp_path, "notes.txt", text="")
    entries = gradebook.collect_folder(str(tmp_path))
    assert [(e.student, e.status) for e in entries] == [("alice", ""), ("bob", ""), ("carol", "ambiguous")]
    assert "2 files for one student (carol/a.py, carol/b.ipynb)" in entries[2].problem
    nothing = tmp_path / "nothing"
    _put(nothing, "slides.pdf", text="")
    with pytest.raises(gradebook.LayoutError, match=r"no \.py or \.ipynb submissions in it \(found 1 other file, "
                                                    r"e\.g\. slides\.pdf\)"):
        gradebook.collect_folder(str(nothing))
    # Files given by name: the file's name, or its path where two share one.
    assert [e.student for e in gradebook.collect_files(["x/alice.py", "y/bob.py"])] == ["alice", "bob"]
    assert [e.student for e in gradebook.collect_files(["x/sub.py", "y/sub.py"])] == ["x/sub", "y/sub"]
    # A file given twice is graded twice (tests/test_sandbox.py grades one file twice on purpose).
    assert gradebook.to_grade(gradebook.collect_files(["a.py", "a.py"])) == ["a.py", "a.py"]


def test_cells_are_inert_in_a_spreadsheet():
    assert gradebook.csv_cell(HOSTILE) == "'" + HOSTILE
    for lead in "=+-@":
        assert gradebook.csv_cell(lead + "1+1").startswith("'")
    assert gradebook.csv_cell("\tx") == "\\tx"  # a tab is shown escaped, so it no longer starts the cell
    assert gradebook.csv_cell("alice") == "alice"
    assert gradebook.printable("a\x1b[2Jb\nc") == "a\\x1b[2Jb\\nc"


def test_gradebook_rows_and_environment_once(tmp_path):
    entries = [gradebook.Entry("alice", "/s/a.py", "hw"), gradebook.Entry(HOSTILE, "/s/h.py", "hw"),
               gradebook.Entry("carol", None, "hw", status="ambiguous", problem="2 files", candidates=["/s/c1.py"]),
               gradebook.Entry("dave", None, "hw", status="missing", problem="nothing handed in")]
    report = {"exercise": "vector_add", "environment": {"mode": "cpu", "torch": "2.13", "fingerprint": "fp"},
              "isolation": {"level": "bubblewrap", "detail": "d"},
              "results": [{"submission": p, "status": s, "score": sc, "message": m, "flags": f}
                          for p, s, sc, m, f in [("/s/a.py", "failed", 0.5, "3 of 6 cases failed", ["x"]),
                                                 ("/s/h.py", "passed", 1.0, "=cmd|' /C calc'!A0", []),
                                                 ("/s/c1.py", "passed", 1.0, "ok", [])]]}
    path = tmp_path / "grades.csv"
    env_path = gradebook.write(entries, report, str(path), points=10)
    assert env_path == str(tmp_path / "grades.env.json")
    rows = list(csv.DictReader(io.StringIO(path.read_text(), newline="")))
    assert list(rows[0]) == gradebook.COLUMNS
    assert [(r["student"], r["points"], r["max_points"], r["status"]) for r in rows] == [
        ("alice", "5", "10", "failed"), ("'" + HOSTILE, "10", "10", "passed"), ("carol", "", "10", "ambiguous"),
        ("dave", "", "10", "missing")]
    assert rows[1]["message"].startswith("'=cmd")  # a message is defused too
    assert "c1.py: passed 1.00" in rows[2]["message"]
    for r in rows:  # no cell starts a formula; no environment on the rows
        assert not any(v[:1] in "=+-@" for v in r.values() if v), r
    env = json.loads(open(env_path).read())
    assert env["environment"]["fingerprint"] == "fp" and env["isolation"]["level"] == "bubblewrap"
    assert env["students"] == 4 and env["statuses"] == {"failed": 1, "passed": 1, "ambiguous": 1, "missing": 1}


def test_instructor_grades_an_nbgrader_course(tmp_path):
    """The issue's acceptance: a nbgrader-style submitted/ tree graded from the command line gives progress on
    stderr, a per-student gradebook, the environment once, and a leaderboard page (Markdown and HTML); the crashed
    student's row says what failed before the crash; hostile names are escaped in every output."""
    course = tmp_path / "course"
    sub = course / "submitted"
    _put(sub, "alice/05_triton/05_triton.py", "right_basic.py")
    _put(sub, "bob/05_triton/work.py", "crash_after_a_failed_case.py")
    _put(sub, f"{HOSTILE}/05_triton/x.py", "right_basic.py")
    _put(sub, "<script>alert(1)<%script>/05_triton/x.py", "wrong_dtype.py")
    _put(sub, "carol/05_triton/a.py", "right_basic.py")
    _put(sub, "carol/05_triton/b.py", "wrong_dtype.py")
    _put(sub, "dave/05_triton/answers.pdf", text="%PDF")
    book, md, page = tmp_path / "grades.csv", tmp_path / "board.md", tmp_path / "board.html"
    proc = _grade(["vector_add", str(course), "--jobs", "2", "--timeout", "120", "--gradebook", str(book),
                   "--points", "10", "--leaderboard", str(md), "--leaderboard", str(page),
                   "--allow-process-isolation"], timeout=600)  # where there is no bwrap (a GPU machine): points too
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Progress: a line per graded file as it finishes, k counting to N.
    progress = re.findall(r"^\[(\d)/(\d)\] ", proc.stderr, re.M)
    assert [int(k) for k, _ in progress] == [1, 2, 3, 4, 5, 6] and {n for _, n in progress} == {"6"}
    assert "note: carol: 2 files" in proc.stderr and "note: dave/05_triton/answers.pdf: not a notebook" in proc.stderr
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO(book.read_text(), newline=""))}
    assert set(rows) == {"alice", "bob", "'" + HOSTILE, "<script>alert(1)<%script>", "carol", "dave"}
    assert (rows["alice"]["points"], rows["alice"]["status"]) == ("10", "passed")
    assert rows["bob"]["status"] == "crashed" and rows["bob"]["points"] == "0"
    assert "killed by SIGABRT after case 'n=1' failed: 1 of 1 elements differ" in rows["bob"]["message"]
    assert rows["carol"]["points"] == "" and rows["carol"]["status"] == "ambiguous"
    assert rows["dave"]["points"] == "" and "answers.pdf" in rows["dave"]["message"]
    assert "torch" not in rows["alice"] and json.loads((tmp_path / "grades.env.json").read_text())["students"] == 6
    board_md, board_html = md.read_text(), page.read_text()
    assert "CPU mode: no speed was measured" in board_md and "CPU mode: no speed was measured" in board_html
    assert "- alice" in board_md and "\\=HYPERLINK\\(" in board_md and "carol \\(a\\.py\\)" in board_md
    assert "<script>" not in board_html and "&lt;script&gt;" not in board_html  # it failed: not on the page at all
    assert "=HYPERLINK(&quot;http:__evil&quot;,&quot;x&quot;)" in board_html


def test_instructor_mistakes_on_the_command_line(tmp_path):
    empty = tmp_path / "course" / "submitted"
    _put(empty, "dave/00_start_here/answers.pdf", text="%PDF")
    proc = _grade(["vector_add", str(tmp_path / "course")])
    assert proc.returncode == 2
    assert "nothing to grade: no student has a .py or .ipynb submission" in proc.stderr
    assert "dave: no .ipynb or .py file in its 00_start_here folder (found: answers.pdf)" in proc.stderr
    proc = _grade(["vector_add", os.path.join(KNOWN, "right_basic.py"), "--assignment", "hw1"])
    assert proc.returncode == 2 and "--assignment names an nbgrader assignment folder" in proc.stderr
    proc = _grade(["vector_add", str(tmp_path / "course"), "--assignment", "hw9"])
    assert proc.returncode == 2 and "no student handed in assignment 'hw9'" in proc.stderr
    right = os.path.join(KNOWN, "right_basic.py")
    proc = _grade(["vector_add", right, "--leaderboard", str(tmp_path / "board.txt")])
    assert proc.returncode == 2 and "name it .md (Markdown) or .html" in proc.stderr
    proc = _grade(["vector_add", right, "--gradebook", str(tmp_path / "no" / "such" / "grades.csv")])
    assert proc.returncode == 2 and "its folder does not exist" in proc.stderr
    proc = _grade(["vector_add", right, "--points", "0"])
    assert proc.returncode == 2 and "--points must be > 0" in proc.stderr
    proc = _grade(["vector_add", str(tmp_path / "course" / "submitted" / "dave" / "00_start_here" / "answers.pdf")])
    assert proc.returncode == 2 and "must be a .py file or an .ipynb notebook" in proc.stderr


def test_help_describes_layouts_gradebook_and_leaderboard():
    proc = _grade(["--help"])
    assert proc.returncode == 0
    for word in ("--gradebook", "--leaderboard", "--assignment", "--points", "submitted/<student>/<assignment>",
                 ".env.json", "--student", "--replace-gradebook", "--summary", "-summary.md",
                 "gpucourse grade vector_add COURSE --student dave --gradebook grades.csv"):
        assert word in proc.stdout, word


# --- Re-grading some students into the class's gradebook; a gradebook write never drops rows (issue 35) -----------

def _report(results, exercise="vector_add"):
    """A report as grader.grade returns it, for gradebook functions tested without grading."""
    return {"exercise": exercise, "environment": {"mode": "cpu", "fingerprint": "fp2"},
            "isolation": {"level": "bubblewrap"},
            "results": [{"submission": p, "status": s, "score": sc, "message": m, "flags": []}
                        for p, s, sc, m in results]}


def _refused(args, capsys) -> str:
    """The command line run in this process (no grading: it must refuse first): its stderr, exit 2 asserted."""
    from gpucourse.grading import cli

    rc = cli.main(["vector_add", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "[1/" not in err  # refused before grading
    return err


def _class_gradebook(path, students=("alice", "bob", "carol")):
    entries = [gradebook.Entry(s, f"/c/{s}.py", "05_triton") for s in students]
    gradebook.write(entries, _report([(f"/c/{s}.py", "failed", 0.5, f"{s}: 3 of 6 cases failed") for s in students]),
                    str(path))
    return path.read_bytes()


def test_update_replaces_rows_in_place_and_keeps_the_others_byte_for_byte(tmp_path):
    """A gradebook an instructor touched (a hand-given grade with a comma and a newline in its message, LF line ends
    from an editor, no newline after the last row) keeps every row not re-graded exactly; the re-graded row is
    replaced where it is, a new student appended, and the .env.json records the re-grade."""
    book = tmp_path / "grades.csv"
    _class_gradebook(book)
    text = book.read_bytes().decode().replace("\r\n", "\n")
    text = text.replace("bob,50,100,failed,bob: 3 of 6 cases failed",
                        'bob,95,100,passed,"late, by hand:\nsee email"').rstrip("\n")
    book.write_bytes(text.encode())
    before = text.split("\n")
    existing = gradebook.read_existing(str(book))
    assert gradebook.existing_students(existing) == ["alice", "bob", "carol"] and existing.newline == "\n"
    entries = [gradebook.Entry("alice", "/c/alice2.py", "05_triton"),
               gradebook.Entry("erin", "/c/erin.py", "05_triton")]
    env_path, replaced, added = gradebook.update(
        existing, entries, _report([("/c/alice2.py", "passed", 1.0, "all 6 cases passed"),
                                    ("/c/erin.py", "error", 0.0, "syntax error")]))
    assert (replaced, added) == (["alice"], ["erin"])
    after = book.read_bytes().decode().split("\n")
    assert after[0] == before[0] and after[2:5] == before[2:5]  # header, bob (two lines), carol: byte for byte
    assert after[1] == "alice,100,100,passed,all 6 cases passed,05_triton,/c/alice2.py,"
    assert after[5:] == ["erin,0,100,error,syntax error,05_triton,/c/erin.py,", ""]
    env = json.loads(open(env_path).read())
    assert env["students"] == 4 and env["statuses"] == {"passed": 2, "failed": 1, "error": 1}
    assert env["regrades"][0]["students"] == ["alice", "erin"] and env["regrades"][0]["environment"]["fingerprint"] \
        == "fp2"


def test_a_gradebook_write_that_would_lose_or_mix_rows_is_refused(tmp_path, capsys):
    """Said before anything is graded (exit 2), the file left as it was: a batch that does not cover every student of
    the existing gradebook, another exercise's gradebook, a --student re-grade with other --points, a file that is not
    a gradebook; --replace-gradebook is the explicit way through."""
    sub = tmp_path / "course" / "submitted"
    _put(sub, "alice/05_triton/a.py", "error_syntax.py")
    _put(sub, "bob/05_triton/b.py", "error_syntax.py")
    course, book = str(tmp_path / "course"), tmp_path / "grades.csv"
    before = _class_gradebook(book)  # alice, bob and carol: carol is not in this batch
    err = _refused([course, "--gradebook", str(book), "--allow-process-isolation"], capsys)
    assert (f"{book} has 1 student this batch does not grade (carol): writing it would drop their rows. To re-grade "
            f"some students, name them with --student NAME (their rows are updated in place, the others kept); to "
            f"write the gradebook anew with this batch's 2 students only, pass --replace-gradebook") in err
    err = _refused([course, "--student", "bob", "--points", "10", "--gradebook", str(book),
                    "--allow-process-isolation"], capsys)
    assert f"{book} gives max_points 100 and this batch would give 10: pass the gradebook's --points" in err
    env = json.loads((tmp_path / "grades.env.json").read_text())
    (tmp_path / "grades.env.json").write_text(json.dumps(dict(env, exercise="matmul")))
    err = _refused([course, "--student", "bob", "--gradebook", str(book), "--allow-process-isolation"], capsys)
    assert f"{book} is the gradebook of exercise matmul" in err and "not of exercise vector_add" in err
    assert "mix two gradebooks in one" in err
    err = _refused([course, "--student", "alice", "--student", "bob", "--student", "carol", "--gradebook", str(book),
                    "--allow-process-isolation"], capsys)
    assert "--student carol: no such student in the submissions; the students found: alice, bob" in err
    notes = tmp_path / "notes.csv"
    notes.write_text("name,grade\nalice,3\n")
    err = _refused([course, "--gradebook", str(notes), "--allow-process-isolation"], capsys)
    assert "notes.csv exists and is not a gradebook this command writes (its columns are name, grade" in err
    err = _refused([course, "--replace-gradebook"], capsys)
    assert "--replace-gradebook: there is no --gradebook to replace" in err
    assert book.read_bytes() == before and notes.read_text() == "name,grade\nalice,3\n"
    # Said explicitly, the batch replaces it: carol's row goes, as asked.
    proc = _grade(["vector_add", str(tmp_path / "course"), "--gradebook", str(book), "--replace-gradebook",
                   "--jobs", "2", "--allow-process-isolation"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert [r["student"] for r in csv.DictReader(io.StringIO(book.read_text(), newline=""))] == ["alice", "bob"]


def test_student_names_an_unknown_student_is_an_error_naming_the_known_ones(tmp_path, capsys):
    sub = tmp_path / "course" / "submitted"
    for s in ("alice", "bob", "dave"):
        _put(sub, f"{s}/05_triton/x.py", text="")
    err = _refused([str(tmp_path / "course"), "--student", "davd", "--student", "bob"], capsys)
    assert ("--student davd: no such student in the submissions (did you mean dave?); the students found: alice, "
            "bob, dave") in err
    _put(tmp_path / "lms", "alice.py", text="")
    _put(tmp_path / "lms", "zoe/work.py", text="")
    err = _refused([str(tmp_path / "lms"), "--student", "bob"], capsys)
    assert "--student bob: no such student in the submissions; the students found: alice, zoe" in err
    with pytest.raises(gradebook.LayoutError, match="the students found: alice, bob, dave"):
        gradebook.select(gradebook.collect_nbgrader(str(sub), "vector_add"), ["erin"])


def test_one_students_folder_of_an_nbgrader_course_is_that_student(tmp_path):
    sub = tmp_path / "course" / "submitted"
    assert gradebook.student_folder(str(sub / "dave")) == (str(sub), "dave", None)
    assert gradebook.student_folder(str(sub / "dave" / "05_triton")) == (str(sub), "dave", "05_triton")
    assert gradebook.student_folder(str(tmp_path / "course")) is None
    assert gradebook.student_folder(str(tmp_path / "lms" / "dave")) is None


def test_regrade_one_student_of_an_nbgrader_course_in_place(tmp_path):
    """The issue's day: a class of three graded into grades.csv; dave hands in a fix; re-grading dave (--student, or
    his folder submitted/dave, --assignment accepted) replaces his row alone: the others' rows are byte for byte what
    they were, in their order, and the class's summary is left as it was."""
    course = tmp_path / "course"
    sub = course / "submitted"
    _put(sub, "alice/05_triton/05_triton.py", "right_basic.py")
    _put(sub, "bob/05_triton/b.py", "error_syntax.py")
    _put(sub, "dave/05_triton/d.py", "error_raises.py")
    book = tmp_path / "grades.csv"
    proc = _grade(["vector_add", str(course), "--jobs", "2", "--gradebook", str(book), "--allow-process-isolation"],
                  timeout=300)
    assert proc.returncode == 0, proc.stderr
    class_rows = book.read_bytes().split(b"\r\n")
    assert [r.split(b",")[0] for r in class_rows[1:4]] == [b"alice", b"bob", b"dave"]
    assert b",error," in class_rows[3]
    class_summary = (tmp_path / "grades-summary.md").read_bytes()
    _put(sub, "dave/05_triton/d.py", "right_basic.py")  # the fix
    proc = _grade(["vector_add", str(course), "--student", "dave", "--gradebook", str(book),
                   "--allow-process-isolation"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "gradebook " + str(book) + ": updated dave; 2 other rows kept as they were" in proc.stderr
    assert "[1/1] " in proc.stderr  # dave alone was graded
    rows = book.read_bytes().split(b"\r\n")
    assert rows[:3] == class_rows[:3] and rows[4:] == class_rows[4:]  # header, alice, bob: byte for byte
    assert rows[3].startswith(b"dave,100,100,passed,all 6 cases passed,05_triton,")
    assert (tmp_path / "grades-summary.md").read_bytes() == class_summary
    assert "the class summary " + str(tmp_path / "grades-summary.md") + " was left as it was" in proc.stderr
    # His folder, as an instructor would point at it: the student is dave (not "05_triton"), --assignment is fine.
    _put(sub, "dave/05_triton/d.py", "error_syntax.py")
    proc = _grade(["vector_add", str(sub / "dave"), "--assignment", "05_triton", "--gradebook", str(book),
                   "--allow-process-isolation"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"note: {sub / 'dave'} is student dave of the nbgrader course {course}: graded as --student dave" \
        in proc.stderr
    rows = book.read_bytes().split(b"\r\n")
    assert rows[:3] == class_rows[:3] and rows[3].startswith(b"dave,0,100,error,")
    assert b"05_triton," not in rows[3][:10]
    env = json.loads((tmp_path / "grades.env.json").read_text())
    assert [r["students"] for r in env["regrades"]] == [["dave"], ["dave"]] and env["students"] == 3
