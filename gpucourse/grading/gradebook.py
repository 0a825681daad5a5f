"""Who handed in what, and the gradebook an LMS can import: one row per student.

Two layouts are read (``collect``):

* a folder of files (an LMS download, a shared drive): every .py and .ipynb file under it is one submission; the
  student is the file's name without its extension (``alice.ipynb`` -> ``alice``), or, for a file in a subfolder, the
  subfolder's name (``bob/workbook.ipynb`` -> ``bob``);
* an nbgrader course directory (``COURSE/submitted/<student>/<assignment>/<files>``, or its ``submitted/`` folder
  itself): the student is the folder name nbgrader gave it, the assignment is chosen with ``--assignment`` or found
  (the exercise's workbook name, or the only assignment there is).

A student with no submission file, with two or more, or with files that are neither notebooks nor .py gets a clear
message (the row says what to do) instead of a guess: a grade an instructor did not see coming is worse than a row
that asks for a decision.

The gradebook (``write``) has one row per student: ``student``, ``points`` out of ``max_points`` (the fraction of
cases passed times ``--points``: what an LMS's CSV import takes; empty for a student with no file or several),
``status``, ``message`` and the file graded. The
environment (GPU, driver, versions, isolation, date) is written once for the batch, in ``<gradebook>.env.json``
beside it, not on every row.

Student names come from paths a student controls. Every text cell is made inert for spreadsheets (a cell starting
with ``= + - @`` or a tab/CR is prefixed with ``'``, OWASP's advice against CSV injection) and control characters are
shown escaped, so a folder named ``=HYPERLINK(...)`` or holding a terminal escape sequence is shown, never run.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os

NOTEBOOK_EXTS = (".py", ".ipynb")
IGNORED_FILES = ("timestamp.txt", "expected.py")  # nbgrader's submission timestamp; the known submissions' expectations
DEFAULT_POINTS = 100.0


class LayoutError(ValueError):
    """The input cannot be read as submissions: the message says why and what to do."""


@dataclasses.dataclass
class Entry:
    """One student's submission for the batch: ``path`` to grade, or None with ``problem`` saying why not."""
    student: str
    path: str | None
    assignment: str = ""
    problem: str = ""  # why nothing is graded for this student ("missing", "ambiguous": see status)
    status: str = ""  # "missing" (no file) or "ambiguous" (several) when path is None
    candidates: list = dataclasses.field(default_factory=list)  # ambiguous: the files, each graded for the report
    notes: list = dataclasses.field(default_factory=list)  # files left out, said on stderr


def printable(text: str) -> str:
    """``text`` with control characters (terminal escapes, newlines, NUL) shown as Python escapes, so a name from
    a path cannot move the cursor, clear the instructor's terminal or split a line."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet shows as text: control characters escaped, and a leading ``= + - @`` (a
    formula) defused with a ``'`` (the prefix spreadsheets hide and treat as "text"). Numbers are written by the
    caller as numbers, not through here."""
    text = printable(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _hidden(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def _files_under(folder: str) -> tuple:
    """(.py/.ipynb files, other files) under ``folder``, hidden and cache folders skipped, sorted."""
    found, other = [], []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not _hidden(d))
        for f in sorted(files):
            if _hidden(f) or f in IGNORED_FILES:
                continue
            (found if f.endswith(NOTEBOOK_EXTS) else other).append(os.path.join(root, f))
    key = lambda p: os.path.relpath(p, folder).split(os.sep)  # noqa: E731
    return sorted(found, key=key), sorted(other, key=key)


def nbgrader_root(path: str) -> str | None:
    """The ``submitted/`` folder when ``path`` is an nbgrader course directory or that folder; else None."""
    if os.path.basename(os.path.normpath(path)) == "submitted" and os.path.isdir(path):
        return path
    sub = os.path.join(path, "submitted")
    return sub if os.path.isdir(sub) else None


def workbook_of(exercise_id: str) -> str:
    """The stem of the workbook an exercise is in (e.g. ``00_start_here``), which is what nbgrader would call the
    assignment; "" if it cannot be told."""
    try:
        import importlib

        from .exercise import _modules

        module = _modules()[exercise_id]
        lesson = importlib.import_module(module.split(".exercises.")[0])
        return lesson.LESSON.notebook
    except Exception:
        return ""


def _pick(files: list, preferred: str) -> str | None:
    """The file to grade of one student's candidate files, or None. Of several, only the released workbook
    (``preferred``.ipynb: nbgrader keeps the released name) is picked, and only when there is exactly one."""
    if len(files) == 1:
        return files[0]
    named = [f for f in files if preferred and os.path.basename(f) == preferred + ".ipynb"]
    return named[0] if len(named) == 1 else None


def collect_nbgrader(submitted: str, exercise_id: str, assignment: str | None = None) -> list:
    """One Entry per student folder of an nbgrader ``submitted/`` folder, for one assignment."""
    students = sorted(d for d in os.listdir(submitted)
                      if os.path.isdir(os.path.join(submitted, d)) and not _hidden(d))
    stray = sorted(f for f in os.listdir(submitted)
                   if os.path.isfile(os.path.join(submitted, f)) and not _hidden(f))
    if not students:
        raise LayoutError(f"{printable(submitted)}: no student folders in it (nbgrader lays submissions out as "
                          f"submitted/<student>/<assignment>/<notebook>.ipynb)")
    names = sorted({a for s in students for a in os.listdir(os.path.join(submitted, s))
                    if os.path.isdir(os.path.join(submitted, s, a)) and not _hidden(a)})
    workbook = workbook_of(exercise_id)
    if assignment is None:
        if workbook in names:
            assignment = workbook
        elif len(names) == 1:
            assignment = names[0]
        elif not names:
            raise LayoutError(f"{printable(submitted)}: the student folders hold no assignment folders (expected "
                              f"submitted/<student>/<assignment>/<notebook>.ipynb)")
        else:
            raise LayoutError(f"{printable(submitted)}: several assignments ({', '.join(map(printable, names))}) and "
                              f"none is named after {exercise_id}'s workbook ({workbook or '?'}): pick one with "
                              f"--assignment NAME")
    elif assignment not in names:
        raise LayoutError(f"{printable(submitted)}: no student handed in assignment {printable(assignment)!r}; "
                          f"assignments found: {', '.join(map(printable, names)) or 'none'}")
    entries = []
    for student in students:
        folder = os.path.join(submitted, student, assignment)
        if not os.path.isdir(folder):
            entries.append(Entry(student, None, assignment, status="missing",
                                 problem=f"no submitted/{printable(student)}/{printable(assignment)}/ folder: "
                                         f"nothing handed in for this assignment"))
            continue
        files, other = _files_under(folder)
        chosen = _pick(files, assignment)
        notes = [f"{printable(os.path.relpath(p, submitted))}: not a notebook or .py file, not graded"
                 for p in other]
        if chosen is not None:
            notes += [f"{printable(os.path.relpath(p, submitted))}: not graded (the released workbook "
                      f"{printable(os.path.basename(chosen))} is)" for p in files if p != chosen]
            entries.append(Entry(student, chosen, assignment, notes=notes))
        elif not files:
            seen = ", ".join(printable(os.path.basename(p)) for p in other) or "nothing"
            entries.append(Entry(student, None, assignment, status="missing", notes=notes,
                                 problem=f"no .ipynb or .py file in its {printable(assignment)} folder (found: "
                                         f"{seen}); nothing graded"))
        else:
            listed = ", ".join(printable(os.path.relpath(p, folder)) for p in files)
            entries.append(Entry(student, None, assignment, status="ambiguous", notes=notes, candidates=files,
                                 problem=f"{len(files)} files that could be the submission ({listed}) and none is "
                                         f"named {printable(assignment)}.ipynb: no grade given; keep one, or grade "
                                         f"the one you choose by its path"))
    for f in stray:
        entries[0].notes.append(f"{printable(f)}: a file directly in submitted/, not in a student's folder; not "
                                f"graded")
    return entries


def collect_folder(folder: str) -> list:
    """One Entry per student of a folder of files (see the module's docstring for who the student is)."""
    files, other = _files_under(folder)
    if not files:
        seen = f" (found {len(other)} other file{'s' if len(other) != 1 else ''}, e.g. " \
               f"{printable(os.path.relpath(other[0], folder))})" if other else ""
        raise LayoutError(f"{printable(folder)}: a folder with no .py or .ipynb submissions in it{seen}")
    by_student: dict = {}
    for p in files:
        parts = os.path.relpath(p, folder).split(os.sep)
        student = parts[0] if len(parts) > 1 else os.path.splitext(parts[0])[0]
        by_student.setdefault(student, []).append(p)
    entries = []
    for student, paths in by_student.items():
        if len(paths) == 1:
            entries.append(Entry(student, paths[0]))
        else:
            listed = ", ".join(printable(os.path.relpath(p, folder)) for p in paths)
            entries.append(Entry(student, None, status="ambiguous", candidates=paths,
                                 problem=f"{len(paths)} files for one student ({listed}): no grade given; keep one, "
                                         f"or grade the one you choose by its path"))
    return entries


def collect_files(paths: list) -> list:
    """One Entry per file given by name: the student is the file's name without its extension (the path's
    folders when two files share a name)."""
    stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    return [Entry(stem if stems.count(stem) == 1 else os.path.splitext(os.path.normpath(p))[0], p)
            for stem, p in zip(stems, paths)]


def to_grade(entries: list) -> list:
    """The files to grade, in order: each entry's file, and each of an ambiguous entry's candidates (their results
    are in the report; the gradebook gives that student no grade until the instructor picks one). A file given twice
    is graded twice, as before (the sandbox's tests grade one file twice on purpose)."""
    return [p for e in entries for p in ([e.path] if e.path is not None else e.candidates)]


def names(entries: list) -> dict:
    """Path -> the name shown for it (the student; with the file's name for an ambiguous student's files)."""
    out = {}
    for e in entries:
        if e.path is not None:
            out[e.path] = e.student
        for p in e.candidates:
            out[p] = f"{e.student} ({os.path.basename(p)})"
    return out


def rows(entries: list, report: dict, points: float = DEFAULT_POINTS) -> list:
    """The gradebook's rows, one per entry, in order: graded entries read their result from ``report`` (matched by
    path). A student with no file or several has no points (an empty cell: an LMS import leaves the grade alone) and
    a message that says why; an ambiguous one's message gives each file's status."""
    by_path = {r["submission"]: r for r in report["results"]}
    out = []
    for e in entries:
        r = by_path.get(e.path) if e.path is not None else None
        if r is None:
            message = e.problem or "not graded"
            graded = [(p, by_path[p]) for p in e.candidates if p in by_path]
            if graded:
                message += " (graded: " + ", ".join(f"{os.path.basename(p)}: {g['status']} {g['score']:.2f}"
                                                    for p, g in graded) + ")"
            out.append({"student": e.student, "points": None, "max_points": points, "status": e.status or "missing",
                        "message": message, "assignment": e.assignment, "submission": e.path or "", "flags": ""})
            continue
        out.append({"student": e.student, "points": round(r["score"] * points, 2), "max_points": points,
                    "status": r["status"], "message": r["message"], "assignment": e.assignment,
                    "submission": r["submission"], "flags": "; ".join(r["flags"])})
    return out


COLUMNS = ["student", "points", "max_points", "status", "message", "assignment", "submission", "flags"]


def environment_path(gradebook_path: str) -> str:
    """Where the batch's environment is written beside the gradebook: ``grades.csv`` -> ``grades.env.json``."""
    return os.path.splitext(gradebook_path)[0] + ".env.json"


def write(entries: list, report: dict, path: str, points: float = DEFAULT_POINTS) -> str:
    """Write the gradebook CSV to ``path`` and the batch's environment beside it; returns the environment's path."""
    table = rows(entries, report, points)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for row in table:
            w.writerow([("" if row[c] is None else f"{row[c]:g}") if c in ("points", "max_points")
                        else csv_cell(row[c]) for c in COLUMNS])
    env_path = environment_path(path)
    counts: dict = {}
    for row in table:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    with open(env_path, "w") as f:
        json.dump({"exercise": report["exercise"], "gradebook": os.path.basename(path),
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "environment": report["environment"], "isolation": report["isolation"],
                   "students": len(table), "statuses": counts,
                   "score": f"points = fraction of cases passed x {points:g}; error, timeout and crashed get 0; "
                            f"missing and ambiguous get none (an empty cell), their message says why"}, f, indent=2)
        f.write("\n")
    return env_path

