"""What a gradebook holds: its rows and columns, for one exercise's batch (:func:`rows`) or a whole assignment's
(:func:`assignment_book`), before anything is written (gradebook.py writes them).

One row per student: ``student``, ``points`` out of ``max_points`` (the fraction of cases passed times ``--points``:
what an LMS's CSV import takes; empty for a student with no file or several), ``status``, ``message`` and the file
graded.
"""
from __future__ import annotations

import dataclasses
import os

DEFAULT_POINTS = 100.0
COLUMNS = ["student", "points", "max_points", "status", "message", "assignment", "submission", "flags"]


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


def score_text(points: float) -> str:
    return (f"points = fraction of cases passed x {points:g}; error, timeout and crashed get 0; missing and ambiguous "
            f"get none (an empty cell), their message says why")


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
