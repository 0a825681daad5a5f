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
import io
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


def write(entries: list, report: dict, path: str, points: float = DEFAULT_POINTS, book: "Book | None" = None) -> str:
    """Write the gradebook CSV to ``path`` (anew: cli.py first checks, with :func:`refusal`, that no row of a
    gradebook already there is lost) and the batch's environment beside it; returns the environment's path.
    ``book``: a whole assignment's rows (:func:`assignment_book`) instead of one exercise's."""
    book = book or Book(report["exercise"], rows(entries, report, points), COLUMNS, _score_text(points))
    _replace_file(path, "".join([_record(book.columns, "\r\n")] +
                                [_record(_row_cells(row, book.columns), "\r\n") for row in book.table]))
    env_path = environment_path(path)
    with open(env_path, "w") as f:
        json.dump({"exercise": book.key, **book.extra, "gradebook": os.path.basename(path), "date": _now(),
                   "environment": report["environment"], "isolation": report["isolation"],
                   "students": len(book.table), "statuses": _count([row["status"] for row in book.table]),
                   "score": book.score}, f, indent=2)
        f.write("\n")
    return env_path


# --- One gradebook for a whole assignment (issue 35, item 4) ---------------------------------------------------------
#
# Workbook 05 has three exercises; an instructor grading it wants one row per student with each exercise's points
# and the total, not three gradebooks merged by hand. The rows are built from each exercise's batch (the students
# are the same in each: who handed in what depends on the assignment only), and written, refused or updated in place
# exactly as one exercise's gradebook is.

SEVERITY = ("missing", "ambiguous", "crashed", "timeout", "error", "failed", "passed")  # worst first


@dataclasses.dataclass
class Book:
    """A gradebook's content: what it is of (an exercise id, or the workbook of an assignment), its rows and columns,
    the score's description, and extra fields for its .env.json."""
    key: str
    table: list
    columns: list
    score: str
    extra: dict = dataclasses.field(default_factory=dict)


def assignment_columns(exercises: list) -> list:
    return COLUMNS + [f"{ex}_points" for ex in exercises]


def assignment_book(workbook: str, graded: list, points: float = DEFAULT_POINTS) -> Book:
    """The gradebook of a whole assignment from ``graded`` = [(exercise id, entries, report)] in the workbook's
    order: per student ``points`` = the sum of the exercises' points out of ``max_points`` = points x exercises, a
    ``<exercise>_points`` column each, ``status`` the worst of the exercises' (SEVERITY), and a message naming each
    exercise's status and points, then each one's own message where it did not pass."""
    exercises = [ex for ex, _, _ in graded]
    per = [{row["student"]: row for row in rows(entries, report, points)} for _, entries, report in graded]
    order = list(dict.fromkeys(row["student"] for table in per for row in table.values()))
    out = []
    for student in order:
        mine = [(ex, table.get(student)) for ex, table in zip(exercises, per)]
        got = [row for _, row in mine if row is not None]
        scored = [row["points"] for row in got if row["points"] is not None]
        status = min((row["status"] for row in got), key=lambda s: SEVERITY.index(s) if s in SEVERITY else 0)
        parts, why = [], []
        for ex, row in mine:
            if row is None:
                parts.append(f"{ex}: not graded")
                continue
            parts.append(f"{ex} {row['status']} {_score_cell(row['points'])}/{points:g}")
            if row["status"] != "passed":
                why.append(f"{ex}: {row['message']}")
        first = got[0] if got else {}
        same = {row["message"] for row in got if row["status"] in ("missing", "ambiguous")}
        if got and all(row["status"] in ("missing", "ambiguous") for row in got) and len(same) == 1:
            message = same.pop()  # nothing graded for this student: the reason once, not once per exercise
        else:
            message = "; ".join(parts) + (" -- " + " | ".join(why) if why else "")
        row = {"student": student, "points": round(sum(scored), 2) if scored else None,
               "max_points": points * len(exercises), "status": status, "message": message,
               "assignment": first.get("assignment", ""), "submission": first.get("submission", ""),
               "flags": "; ".join(f"{ex}: {row['flags']}" for ex, row in mine if row and row["flags"])}
        for ex, r in mine:
            row[f"{ex}_points"] = None if r is None else r["points"]
        out.append(row)
    score = (f"points = the sum over the exercises ({', '.join(exercises)}) of the fraction of cases passed x "
             f"{points:g}; error, timeout and crashed get 0; missing and ambiguous get none (an empty cell)")
    return Book(workbook, out, assignment_columns(exercises), score, {"exercises": exercises})


def _score_cell(points) -> str:
    return "-" if points is None else f"{points:g}"


# --- Re-grading some students, and never losing a gradebook's rows (issue 35) -------------------------------------
#
# An instructor re-grades one student (a late hand-in, a fixed notebook) into the class's gradebook. Writing that
# batch over grades.csv would leave one row where the class was, and nothing said so. So a gradebook that already
# exists is either updated in place (--student: the re-graded students' rows replaced where they are, every other
# row kept byte for byte, the order kept, new students appended) or replaced only when the batch covers every
# student it lists, or when the instructor says so (--replace-gradebook).


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


def _listed(names: list, most: int = 20) -> str:
    shown = ", ".join(map(printable, names[:most]))
    return shown + (f" and {len(names) - most} more" if len(names) > most else "") if names else "none"


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
                          f"{hint}; the students found: {_listed(sorted(known))}")
    wanted = set(students)
    return [e for e in entries if e.student in wanted]


@dataclasses.dataclass
class Existing:
    """A gradebook already on disk, read so that rows not re-graded are written back exactly as they were."""
    path: str
    head: str  # the header line as it is in the file (a byte-order mark included)
    records: list  # [(student cell, status cell, raw text of the record)] in the file's order
    newline: str  # "\r\n" (as csv writes) or "\n" (a file a spreadsheet or editor saved)
    max_points: set  # the max_points cells found
    environment: dict  # its .env.json, {} where there is none or it cannot be read


def read_existing(path: str, columns: list = COLUMNS) -> Existing:
    """The gradebook at ``path``, record by record with each record's raw text (csv reads it, and the lines it
    consumed are kept, so a quoted cell holding a newline stays one record). LayoutError where it is not a gradebook
    this command writes (other columns, a student listed twice): updating it would be a guess."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="surrogateescape")
    lines = text.splitlines(keepends=True)
    consumed: list = []

    def feed():
        for line in lines:
            consumed.append(line)
            yield line

    records, head, students = [], None, set()
    max_points = set()
    for cells in csv.reader(feed()):
        raw = "".join(consumed)
        consumed.clear()
        if head is None:
            head = raw
            if [c.lstrip("\ufeff") for c in cells[:1]] + cells[1:] != columns:
                raise LayoutError(f"{printable(path)} exists and is not a gradebook this command writes (its columns "
                                  f"are {printable(', '.join(cells))[:200]}; this gradebook's are "
                                  f"{', '.join(columns)}): name another --gradebook file, or pass --replace-gradebook "
                                  f"to overwrite it")
            continue
        if not any(cells):
            records.append((None, None, raw))  # a blank line: kept as it is
            continue
        row = dict(zip(columns, cells + [""] * (len(columns) - len(cells))))
        if row["student"] in students:
            raise LayoutError(f"{printable(path)} lists student {printable(row['student'])} twice: which row to update"
                              f" cannot be told; fix the file, or pass --replace-gradebook to write it anew")
        students.add(row["student"])
        max_points.add(row["max_points"])
        records.append((row["student"], row["status"], raw))
    if head is None:
        raise LayoutError(f"{printable(path)} exists and is empty, not a gradebook: delete it, or pass "
                          f"--replace-gradebook")
    newline = "\n" if head.endswith("\n") and not head.endswith("\r\n") else "\r\n"
    environment = {}
    try:
        with open(environment_path(path)) as f:
            environment = json.load(f)
        environment = environment if isinstance(environment, dict) else {}
    except (OSError, ValueError):
        pass
    return Existing(path, head, records, newline, max_points, environment)


def existing_students(existing: Existing) -> list:
    """The student cells of ``existing``, in its order (as written: a hostile name's cell is defused)."""
    return [s for s, _, _ in existing.records if s is not None]


def refusal(existing: Existing, entries: list, exercise: str, points: float, partial: bool) -> str | None:
    """Why writing this batch's rows to ``existing`` would lose or mix grades, or None when it is safe.

    ``partial`` (--student, or one student's folder): the re-graded rows replace theirs in place, so the gradebook
    must be this exercise's (its .env.json says which) with the same max_points. Otherwise the batch replaces the
    file: every student it lists must be in the batch, and it must be this exercise's."""
    where = printable(existing.path)
    was = existing.environment.get("exercise")
    if was and was != exercise:
        return (f"{where} is the gradebook of {_what(printable(was))} ({printable(environment_path(existing.path))}"
                f" says so), not of {_what(exercise)}: writing this batch there would "
                f"{'mix two gradebooks in one' if partial else 'replace its rows'}; name another "
                f"--gradebook file, or pass --replace-gradebook to overwrite it")
    if partial:
        other = sorted(m for m in existing.max_points if m != f"{points:g}")
        if other:
            return (f"{where} gives max_points {', '.join(map(printable, other))} and this batch would give "
                    f"{points:g}: pass the gradebook's --points so its rows stay comparable, or --replace-gradebook")
        return None
    batch = {csv_cell(e.student) for e in entries}
    lost = [s for s in existing_students(existing) if s not in batch]
    if lost:
        return (f"{where} has {len(lost)} student{'s' if len(lost) != 1 else ''} this batch does not grade "
                f"({_listed(lost)}): writing it would drop their rows. To re-grade some students, name them with "
                f"--student NAME (their rows are updated in place, the others kept); to write the gradebook anew "
                f"with this batch's {len(batch)} student{'s' if len(batch) != 1 else ''} only, pass "
                f"--replace-gradebook")
    return None


def _what(key: str) -> str:
    """"exercise vector_add" or "assignment 05_triton" (a workbook's name starts with its two-digit number)."""
    return f"assignment {key}" if key[:2].isdigit() and key[2:3] == "_" else f"exercise {key}"


def _row_cells(row: dict, columns: list = COLUMNS) -> list:
    return [("" if row[c] is None else f"{row[c]:g}") if c in ("points", "max_points") or c.endswith("_points")
            else csv_cell(row[c]) for c in columns]


def _record(cells: list, newline: str) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator=newline).writerow(cells)
    return buf.getvalue()


def _replace_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, so an interrupted write leaves the old file."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(text.encode("utf-8", errors="surrogateescape"))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def update(existing: Existing, entries: list, report: dict, points: float = DEFAULT_POINTS,
           book: Book | None = None) -> tuple:
    """Write the rows of ``entries`` (a re-graded subset) into ``existing`` in place: a student's row is replaced
    where it is, a student the gradebook lacks is appended, every other record is written back as it was read
    (byte for byte). The .env.json keeps the first batch's environment and adds this re-grade (students, date,
    environment, isolation) to its ``regrades``, with the counts recomputed. Returns (environment path,
    [students replaced], [students added]). ``book``: a whole assignment's rows (:func:`assignment_book`)."""
    book = book or Book(report["exercise"], rows(entries, report, points), COLUMNS, _score_text(points))
    fresh = {}
    for row in book.table:
        fresh[csv_cell(row["student"])] = row
    out, replaced, statuses = [existing.head], [], []
    for student, status, raw in existing.records:
        if student in fresh:
            row = fresh.pop(student)
            ending = existing.newline if raw.endswith(("\n", "\r")) else ""
            out.append(_record(_row_cells(row, book.columns), existing.newline)[:-len(existing.newline)] + ending)
            replaced.append(student)
            statuses.append(row["status"])
        else:
            out.append(raw)
            if student is not None:
                statuses.append(status)
    if fresh and out[-1] and not out[-1].endswith(("\n", "\r")):
        out[-1] += existing.newline  # a last record without a newline: the appended rows start on their own line
    for student, row in fresh.items():
        out.append(_record(_row_cells(row, book.columns), existing.newline))
        statuses.append(row["status"])
    _replace_file(existing.path, "".join(out))
    env = dict(existing.environment) or {"exercise": book.key, **book.extra,
                                         "gradebook": os.path.basename(existing.path),
                                         "environment": report["environment"], "isolation": report["isolation"],
                                         "score": book.score}
    env.setdefault("regrades", []).append({
        "date": _now(), "students": [e.student for e in entries], "environment": report["environment"],
        "isolation": report["isolation"]})
    env["students"] = len(statuses)
    env["statuses"] = _count(statuses)
    env_path = environment_path(existing.path)
    with open(env_path, "w") as f:
        json.dump(env, f, indent=2)
        f.write("\n")
    return env_path, replaced, list(fresh)


def _score_text(points: float) -> str:
    return (f"points = fraction of cases passed x {points:g}; error, timeout and crashed get 0; missing and ambiguous "
            f"get none (an empty cell), their message says why")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _count(statuses: list) -> dict:
    counts: dict = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return counts
