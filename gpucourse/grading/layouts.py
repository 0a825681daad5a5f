"""Who handed in what: the submissions of a batch read from the layout they come in, one Entry per student.

Two layouts are read:

* a folder of files (an LMS download, a shared drive): every .py and .ipynb file under it is one submission; the
  student is the file's name without its extension (``alice.ipynb`` -> ``alice``), or, for a file in a subfolder, the
  subfolder's name (``bob/workbook.ipynb`` -> ``bob``);
* an nbgrader course directory (``COURSE/submitted/<student>/<assignment>/<files>``, or its ``submitted/`` folder
  itself): the student is the folder name nbgrader gave it, the assignment is chosen with ``--assignment`` or found
  (the exercise's workbook name, or the only assignment there is).

A student with no submission file, with two or more, or with files that are neither notebooks nor .py gets a clear
message (the row says what to do) instead of a guess: a grade an instructor did not see coming is worse than a row
that asks for a decision. Names are shown through :mod:`.safe_text` (they come from paths a student controls).
"""
from __future__ import annotations

import dataclasses
import os

from .safe_text import listed, printable

NOTEBOOK_EXTS = (".py", ".ipynb")
IGNORED_FILES = ("timestamp.txt", "expected.py")  # nbgrader's submission timestamp; the known submissions' expectations


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


def student_folder(path: str) -> tuple | None:
    """``(submitted/ folder, student, assignment or None)`` when ``path`` is one student's folder of an nbgrader tree
    (``submitted/<student>``) or one of its assignment folders (``submitted/<student>/<assignment>``); else None.
    Read as a folder of files, ``submitted/dave`` would name its student after the assignment folder (``05_triton``):
    the course directory's layout says who it is."""
    full = os.path.normpath(os.path.abspath(path))
    parent, grandparent = os.path.dirname(full), os.path.dirname(os.path.dirname(full))
    up = lambda n: os.path.normpath(os.path.join(path, *[os.pardir] * n))  # noqa: E731 (as given: the report's)
    if os.path.basename(parent) == "submitted" and not _hidden(os.path.basename(full)):
        return up(1), os.path.basename(full), None
    if os.path.basename(grandparent) == "submitted" and not _hidden(os.path.basename(parent)):
        return up(2), os.path.basename(parent), os.path.basename(full)
    return None


def select(entries: list, students: list) -> list:
    """The entries of ``students`` (``--student``, in the batch's order); a name no entry has is a LayoutError that
    lists the students found (and the closest names), since a typo must not grade nobody, or somebody else."""
    import difflib

    known = list(dict.fromkeys(e.student for e in entries))
    unknown = [s for s in dict.fromkeys(students) if s not in known]
    if unknown:
        close = sorted({c for s in unknown for c in difflib.get_close_matches(s, known, n=3)})
        hint = f" (did you mean {', '.join(map(printable, close))}?)" if close else ""
        raise LayoutError(f"--student {', '.join(map(printable, unknown))}: no such student in the submissions"
                          f"{hint}; the students found: {listed(sorted(known))}")
    wanted = set(students)
    return [e for e in entries if e.student in wanted]
