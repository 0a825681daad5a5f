"""The gradebook an LMS can import, as a CSV file: written anew (:func:`write`), or, where one is already on disk,
read (:func:`read_existing`), refused where the batch would lose or mix grades (:func:`refusal`) and updated in place
(:func:`update`).

Its rows are built in gradebook_rows.py (one exercise's, or a whole assignment's); who handed in what is read in
layouts.py; both are re-exported here, as is safe_text.py's :func:`printable` and :func:`csv_cell`, so this module
stays the one import for callers. The environment (GPU, driver, versions, isolation, date) is written once for the
batch, in ``<gradebook>.env.json`` beside it, not on every row.

Student names come from paths a student controls. Every text cell is made inert for spreadsheets and control
characters are shown escaped (:func:`csv_cell`), so a folder named ``=HYPERLINK(...)`` or holding a terminal escape
sequence is shown, never run.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import os

from .gradebook_rows import (COLUMNS, DEFAULT_POINTS, SEVERITY, Book, assignment_book, assignment_columns, rows,
                             score_text)
from .layouts import (IGNORED_FILES, NOTEBOOK_EXTS, Entry, LayoutError, collect_files, collect_folder,
                      collect_nbgrader, names, nbgrader_root, select, student_folder, to_grade, workbook_of)
from .safe_text import csv_cell, listed, printable

__all__ = ["COLUMNS", "DEFAULT_POINTS", "IGNORED_FILES", "NOTEBOOK_EXTS", "SEVERITY", "Book", "Entry", "Existing",
           "LayoutError", "assignment_book", "assignment_columns", "collect_files", "collect_folder",
           "collect_nbgrader", "csv_cell", "environment_path", "existing_students", "names", "nbgrader_root",
           "printable", "read_existing", "refusal", "rows", "select", "student_folder", "to_grade", "update",
           "workbook_of", "write"]


def environment_path(gradebook_path: str) -> str:
    """Where the batch's environment is written beside the gradebook: ``grades.csv`` -> ``grades.env.json``."""
    return os.path.splitext(gradebook_path)[0] + ".env.json"


def write(entries: list, report: dict, path: str, points: float = DEFAULT_POINTS, book: Book | None = None) -> str:
    """Write the gradebook CSV to ``path`` (anew: cli.py first checks, with :func:`refusal`, that no row of a
    gradebook already there is lost) and the batch's environment beside it; returns the environment's path.
    ``book``: a whole assignment's rows (:func:`assignment_book`) instead of one exercise's."""
    book = book or Book(report["exercise"], rows(entries, report, points), COLUMNS, score_text(points))
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


# --- Re-grading some students, and never losing a gradebook's rows (issue 35) -------------------------------------
#
# An instructor re-grades one student (a late hand-in, a fixed notebook) into the class's gradebook. Writing that
# batch over grades.csv would leave one row where the class was, and nothing said so. So a gradebook that already
# exists is either updated in place (--student: the re-graded students' rows replaced where they are, every other
# row kept byte for byte, the order kept, new students appended) or replaced only when the batch covers every
# student it lists, or when the instructor says so (--replace-gradebook).


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
                f"({listed(lost)}): writing it would drop their rows. To re-grade some students, name them with "
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
    book = book or Book(report["exercise"], rows(entries, report, points), COLUMNS, score_text(points))
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



def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _count(statuses: list) -> dict:
    counts: dict = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return counts
