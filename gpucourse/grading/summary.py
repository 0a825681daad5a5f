"""A class summary of one graded batch: what went wrong for the class as a whole, for the instructor to act on.

A gradebook says how each student did; after a workshop the instructor's next question is what the class got wrong
(which case most failed, with what message: a gap in the lesson or a trap in the exercise), what deserves a look
(flags, timeouts, crashes), and who was fastest. ``summarize`` answers from the report ``grader.grade`` returns (the
JSON ``--json`` writes), so a summary can be rebuilt from a saved report too:

* the statuses counted, and the students the batch could not grade (no file, several files);
* per case (the exercise's checks, in the order they run; ``load`` where loading the submission failed or hung):
  how many submissions ran it and how many failed it, and its most common failure messages;
* the most common messages and flags over the batch;
* the timeouts and crashes, by student, with their messages;
* the leaderboard's top (GPU batches graded for points; a CPU batch measures no speed and says so).

Messages are grouped once numbers are replaced by ``N``: "1066 of 1066 elements differ" and "511 of 513 elements
differ" are one problem seen by two students, not two problems (sizes are drawn per run, so the numbers differ even
between identical mistakes). A check's detail is grouped by its first line, the problem; the lines after it are the
numbers that illustrate it.

``text`` is the few lines printed after a batch; ``markdown`` the file written beside the gradebook
(``<gradebook stem>-summary.md``, or ``--summary PATH``). Messages and names come from submissions a student controls:
the Markdown escapes them as the leaderboard page does, and the text shows control characters escaped.
"""
from __future__ import annotations

import datetime
import os
import re

from . import leaderboard
from .safe_text import printable

TOP = 3  # messages shown per case, and places of the leaderboard
MESSAGE_CHARS = 160  # a grouped message is cut here: the group is the problem, the full text is in the report
STATUS_ORDER = ("passed", "failed", "error", "timeout", "crashed")

# A number standing alone: not a word's digits (float32, x86_64, sm_90), hex addresses included.
_NUMBER = re.compile(r"(?<![A-Za-z_\d.])(?:0[xX][0-9a-fA-F]+|[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)")


def normalise(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text``'s first line with its numbers replaced by ``N`` and its spaces collapsed, cut at ``limit``
    characters: the key under which the same problem, seen with other sizes, is counted once."""
    first = str(text or "").strip().split("\n", 1)[0]
    out = " ".join(_NUMBER.sub("N", first).split())
    return out if len(out) <= limit else out[:limit - 3].rstrip() + "..."


def _ranked(counts: dict, first_seen: dict) -> list:
    """[(key, count)] most common first; ties in the order first seen (the batch's order, so reruns agree)."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))


class _Counter:
    def __init__(self):
        self.counts, self.seen = {}, {}

    def add(self, key: str) -> None:
        self.seen.setdefault(key, len(self.seen))
        self.counts[key] = self.counts.get(key, 0) + 1

    def top(self, n: int | None = None) -> list:
        return _ranked(self.counts, self.seen)[:n]


def summarize(report: dict, names: dict | None = None, ungraded: list = ()) -> dict:
    """The summary of ``report`` as data. ``names``: path -> the student's name (gradebook.names), default the file's
    name; ``ungraded``: [(student, status, problem)] the batch could not grade (gradebook entries without a file).

    Returns ``{"exercise", "graded", "statuses": {status: n}, "ungraded": [(student, status, problem)],
    "cases": [{"name", "ran", "failed", "messages": [(message, n)] (the commonest), "distinct": n}],
    "messages": [(message, n)], "flags": [(flag, n)], "timeouts": [(student, message)], "crashes": [(student, message)],
    "internal": [(student, message)], "leaderboard": {"top": [(rank, student, speed, time)], "note"}}``. Each count
    is of submissions: a submission failing one case twice, or flagged twice alike, counts once."""
    names = names or {}
    results = report.get("results", [])

    def name(r):
        return names.get(r["submission"]) or os.path.basename(r["submission"])

    statuses: dict = {s: 0 for s in STATUS_ORDER}
    cases: dict = {}  # name -> {"ran", "failed", "messages": _Counter}
    messages, flags = _Counter(), _Counter()
    timeouts, crashes, internal = [], [], []
    for i, r in enumerate(results):
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        for check in r.get("checks") or []:
            case = cases.setdefault(str(check.get("name", "?")), {"ran": 0, "failed": 0, "messages": _Counter(),
                                                                  "counted": set()})
            if i in case["counted"]:  # a case listed twice for one submission counts once
                continue
            case["counted"].add(i)
            case["ran"] += 1
            if not check.get("passed"):
                case["failed"] += 1
                case["messages"].add(normalise(check.get("detail") or "failed"))
        if r["status"] != "passed":
            messages.add(normalise(r.get("message", "")))
        for flag in dict.fromkeys(normalise(f) for f in r.get("flags") or []):
            flags.add(flag)
        if "internal grader error" in (r.get("flags") or []):
            internal.append((name(r), r.get("message", "")))
        elif r["status"] == "timeout":
            timeouts.append((name(r), r.get("message", "")))
        elif r["status"] == "crashed":
            crashes.append((name(r), r.get("message", "")))
    return {"exercise": report.get("exercise", "?"), "graded": len(results),
            "statuses": {s: n for s, n in statuses.items() if n},
            "ungraded": [tuple(u) for u in ungraded],
            "cases": [{"name": n, "ran": c["ran"], "failed": c["failed"], "messages": c["messages"].top(TOP),
             "distinct": len(c["messages"].counts)}
                      for n, c in cases.items()],
            "messages": messages.top(), "flags": flags.top(), "timeouts": timeouts, "crashes": crashes,
            "internal": internal, "leaderboard": _leaders(report, names)}


def _leaders(report: dict, names: dict) -> dict:
    """The leaderboard's top TOP places, or why there are none (the same ranking as the leaderboard page)."""
    standing = report.get("standing") or {"for_points": True}
    if not standing.get("for_points", True):
        return {"top": [], "note": f"no ranking: {standing.get('why', 'not graded for points')}"}
    b = leaderboard.board(report, names)
    if b["mode"] != "gpu":
        return {"top": [], "note": "CPU mode: no speed was measured, so there is no ranking"}
    top = [(leaderboard._rank_text(r), r["name"], leaderboard._ratio_text(r), leaderboard._time_text(r))
           for r in b["ranked"] if r["rank"] <= TOP]
    note = "" if top else "no passing submission has a measured speed to rank"
    if b["unranked"]:
        note = (note + "; " if note else "") + f"{len(b['unranked'])} passing not ranked (see the leaderboard page)"
    return {"top": top, "note": note}


def _counts_line(s: dict) -> str:
    parts = [f"{n} {status}" for status, n in s["statuses"].items()]
    by = {}
    for _, status, _ in s["ungraded"]:
        by[status] = by.get(status, 0) + 1
    parts += [f"{n} not graded ({status})" for status, n in by.items()]
    return f"{s['graded']} graded: " + ", ".join(parts)


def text(s: dict, path: str | None = None, width: int = 150) -> str:
    """The short summary printed after a batch: counts, the failing cases with their commonest message, flags,
    timeouts and crashes by name, the leaderboard's top; ``path``: where the full one was written."""
    p = printable

    def cut(line):
        return line if len(line) <= width else line[:width - 3] + "..."

    out = [f"summary: {p(s['exercise'])}, {_counts_line(s)}"]
    for c in s["cases"]:
        if c["failed"]:
            msg, n = c["messages"][0]
            others = c["distinct"] - 1
            more = f" (+{others} other message{'s' if others != 1 else ''})" if others else ""
            out.append(cut(f"  case {p(c['name'])}: {c['failed']} of {c['ran']} failed; most: {p(msg)} [{n}]{more}"))
    for flag, n in s["flags"][:TOP]:
        out.append(cut(f"  flag [{n}]: {p(flag)}"))
    for label, items in (("timeouts", s["timeouts"]), ("crashes", s["crashes"]), ("internal grader errors",
                                                                                   s["internal"])):
        if items:
            out.append(cut(f"  {label}: " + ", ".join(p(who) for who, _ in items)))
    lb = s["leaderboard"]
    if lb["top"]:
        out.append(cut("  fastest: " + "; ".join(f"{rank} {p(who)} {speed}" for rank, who, speed, _ in lb["top"])))
    if path:
        out.append(f"  (full summary: {p(path)})")
    return "\n".join(out)


def markdown(s: dict) -> str:
    """The full summary as Markdown. Every text from a submission (names, messages, flags) is escaped
    (leaderboard.md_text), so a student's exception message cannot add a link, a tag or a table cell."""
    md = leaderboard.md_text
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"# Class summary: {md(s['exercise'])}", "", f"{_counts_line(s)}. Written {date}.", "",
           "Messages are grouped with their numbers replaced by N (sizes are drawn per run); a count is of "
           "submissions.", ""]
    if s["ungraded"]:
        out += ["## Not graded", ""] + [f"- {md(who)} ({status}): {md(problem)}" for who, status, problem in
                                        s["ungraded"]] + [""]
    out += ["## Cases", ""]
    if s["cases"]:
        out += ["| case | failed | ran | most common failure messages |", "|---|---:|---:|---|"]
        for c in s["cases"]:
            msgs = "; ".join(f"{md(m)} \\[{n}\\]" for m, n in c["messages"]) or "-"
            out.append(f"| {md(c['name'])} | {c['failed']} | {c['ran']} | {msgs} |")
    else:
        out.append("No case ran (every submission failed before its first case).")
    out += ["", "## Most common messages", ""]
    out += [f"- \\[{n}\\] {md(m)}" for m, n in s["messages"][:10]] or ["Every submission passed."]
    out += ["", "## Flags (for a human to look at)", ""]
    out += [f"- \\[{n}\\] {md(f)}" for f, n in s["flags"]] or ["None."]
    out += ["", "## Timeouts and crashes", ""]
    items = ([("timeout", w, m) for w, m in s["timeouts"]] + [("crashed", w, m) for w, m in s["crashes"]]
             + [("internal grader error", w, m) for w, m in s["internal"]])
    out += [f"- {md(who)} ({label}): {md(_cut(msg, 2 * MESSAGE_CHARS))}" for label, who, msg in items] or ["None."]
    out += ["", "## Leaderboard", ""]
    lb = s["leaderboard"]
    if lb["top"]:
        out += ["| rank | student | speed | time |", "|---:|---|---:|---:|"]
        out += [f"| {md(rank)} | {md(who)} | {md(speed)} | {md(time)} |" for rank, who, speed, time in lb["top"]]
    if lb["note"]:
        out += (["", md(lb["note"])] if lb["top"] else [md(lb["note"])])
    return "\n".join(out) + "\n"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def path_beside(gradebook_path: str) -> str:
    """Where the summary goes beside a gradebook: ``grades.csv`` -> ``grades-summary.md``."""
    return os.path.splitext(gradebook_path)[0] + "-summary.md"


def write(s: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(markdown(s))
