"""Feedback to hand back (issue 35): a page per graded submission that a student can open, as nbgrader writes
``feedback/<student>/<assignment>/``.

``gpucourse grade EXERCISE ... --feedback DIR`` writes ``DIR/<student>/<assignment>/<exercise>.html`` for each graded
submission (the assignment is nbgrader's, else the exercise's id) and ``DIR/index.html`` listing them. A page holds
what the JSON report holds for that submission: the status, score and message, the flags, and every case with its
verdict (PASS/FAIL) and the checker's text, its ``hint:`` lines highlighted; the speed where one was measured, and
beside it the Nsight Compute summary of the timed call where ``--profile`` made one; and a footer saying what the
statuses mean. ``gpucourse grade merge SHARD.json ... --feedback DIR`` (merge.py) writes the same pages from the
shards' JSON reports, which hold all of it.

A page is one self-contained file: no script, no external stylesheet, font or image, and a content security policy
that allows none. Everything on it that comes from the submission or the checker (messages quote the student's
exceptions, tracebacks and source lines; names come from paths a student controls) is HTML-escaped, with control
characters shown as escapes (``leaderboard.html_text``). File and folder names are made of the student's and the
assignment's names by :func:`safe_name`, which keeps them inside DIR: ``../../etc`` becomes one plain folder name.

A failed case whose report carries the checker's map of where its output is wrong (``check["where"]``, the
checker's ``compare.WhereMap`` as report.where_field keeps it: pooled to at most report.WHERE_SIDE cells per side)
gets a picture of it, drawn inline as an SVG of coloured cells with drawing.py's colours and names, and a legend
with the exact counts: a strip of the elements (wrapped into rows) for a 1-D output, the last two dimensions for a
larger one, the writes past the end after the last element. Nothing is fetched: the page's content security policy
allows no image, and needs none. The map is read as untrusted (a merged shard is a file someone could edit): its
sizes, counts and codes are checked against each other before anything is drawn, and a map that fails is shown as a
line saying so, never drawn and never quoted. The batch grader's maps mark no writes past the end: its worker sends a
copy of the output, without the guard band after it (the case's text says what was written there).
"""
from __future__ import annotations

import datetime
import html
import os
import re
import urllib.parse

from . import gradebook, guards
from .compare import NEVER, NONE, PAST, RIGHT, WRONG, block_for
from .drawing import COLOURS, NAMES
from .leaderboard import html_text
from .report import WHERE_PAST, WHERE_SIDE

INDEX = "index.html"
NAME_CHARS = 80  # a file or folder name made from a student's name is cut to this many characters

# What each status means, in the student's words (gpucourse grade --help says the same to the instructor).
STATUSES = {
    "passed": "every case passed (score 1).",
    "failed": "your code ran, but some cases are wrong: wrong values, shape, dtype or device, elements never "
              "written, writes past the end of the output, a result that changes from run to run, or no required "
              "kernel launched (score: the fraction of cases passed).",
    "error": "your code could not be loaded or compiled, or it raised an exception (score 0).",
    "timeout": "your code ran past the time limit, imports included (score 0).",
    "crashed": "the process running your code died: a segfault, an abort, os._exit, a CUDA fault (score 0).",
}
FLAGS_NOTE = "for the instructor to look at; flags do not change the status or the score"

_CSS = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.4}"
        "table{border-collapse:collapse}td,th{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:left}"
        "pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap}"
        ".hint{background:#fff3b0;font-weight:bold}.case{margin:1em 0;padding-left:.6em;border-left:4px solid #ccc}"
        ".case.pass{border-color:#2a2}.case.fail{border-color:#c22}.verdict{font-weight:bold;margin-right:.5em}"
        ".pass .verdict,.passed{color:#171}.fail .verdict,.failed,.error,.timeout,.crashed{color:#b11}"
        ".where{display:block;margin:.4em 0}.legend span{margin-right:1.2em;white-space:nowrap}"
        ".legend svg{vertical-align:middle;margin-right:.3em}footer{margin-top:2em;color:#555;font-size:.9em}")


def safe_name(text: str, limit: int = NAME_CHARS) -> str:
    """A file or folder name made of ``text``: letters, digits, ``_``, ``-`` and ``.`` kept, runs of anything else
    (``/``, spaces, control characters) one ``_``, leading dots ``_`` (so neither ``..`` nor a hidden name), cut to
    ``limit`` characters; ``_`` when nothing is left."""
    name = re.sub(r"[^\w.-]+", "_", str(text))[:limit]
    name = re.sub(r"^\.+", lambda m: "_" * len(m.group()), name)
    return name or "_"


def _head(title: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>{title}</title><style>{_CSS}</style>"
            "</head>\n<body>\n")


def _detail(detail: str) -> str:
    """The checker's text (a case's, or the message), preformatted: every line escaped, each ``hint:`` line
    highlighted."""
    lines = []
    for line in str(detail).expandtabs(4).splitlines():
        text = html_text(line)
        lines.append(f"<span class=\"hint\">{text}</span>" if line.startswith("hint: ") else text)
    return "<pre>" + "\n".join(lines) + "</pre>"


def _case(check: dict) -> str:
    passed = bool(check.get("passed"))
    verdict, kind = ("PASS", "pass") if passed else ("FAIL", "fail")
    picture = _where(check["where"]) if not passed and "where" in check else ""
    return (f"<section class=\"case {kind}\"><h3><span class=\"verdict\">{verdict}</span>"
            f"{html_text(check.get('name', '?'))}</h3>{_detail(check.get('detail', ''))}{picture}</section>")


# The picture of a failed case's where map (report.where_field's form): at most DRAWN_SIDE cells per side (a map
# with writes past the end may need more: pooled again, a cell showing its worst element), a 1-D strip wrapped into
# rows of WRAP cells, each cell a square of at most CELL_PX pixels in a picture at most PICTURE_PX wide. Each row's
# runs of one code are one piece of a path: a picture takes about 1-2 KB of the page, about 16 KB at most (1,024
# cells of alternating codes, as many runs).
DRAWN_SIDE, WRAP = 64, 64
CELL_PX, PICTURE_PX = 16, 640
MAX_NDIM, MAX_NUMEL = 16, 2**62  # a larger output in a map read from a report: malformed (torch's sizes are int64)


class _Malformed(ValueError):
    """A where map that does not hold together; its text names the field."""


def _ints(value, field: str, n_max: int, lo: int, hi: int) -> list:
    """``value`` when it is a list of at most ``n_max`` ints (not bools) in [lo, hi]; else _Malformed(field)."""
    if not isinstance(value, list) or len(value) > n_max or \
            not all(type(v) is int and lo <= v <= hi for v in value):
        raise _Malformed(field)
    return value


def _checked(w) -> dict:
    """``w`` (a report's ``check["where"]``) with its fields checked against each other: the shape and its number of
    elements, the counts adding up to it, the slice inside the shape, the codes (compare's RIGHT, WRONG, NEVER) as
    many as the shape pooled by the block gives, at most report.WHERE_SIDE per side, the offsets past the end inside
    the guard band and no more than counted. _Malformed naming the first field that is not right."""
    if not isinstance(w, dict):
        raise _Malformed("not a mapping")
    shape = _ints(w.get("shape"), "shape", MAX_NDIM, 1, MAX_NUMEL)
    numel = 1
    for s in shape:
        numel *= s
        if numel > MAX_NUMEL:
            raise _Malformed("shape")
    one_d = len(shape) <= 1
    block = _ints(w.get("block"), "block", 2, 1, MAX_NUMEL)
    index = _ints(w.get("slice"), "slice", MAX_NDIM, 0, MAX_NUMEL)
    if len(block) != (1 if one_d else 2):
        raise _Malformed("block")
    if len(index) != max(0, len(shape) - 2) or any(i >= s for i, s in zip(index, shape)):
        raise _Malformed("slice")
    counts = {k: _ints([w.get(k)], k, 1, 0, MAX_NUMEL)[0] for k in ("n_right", "n_wrong", "n_never", "n_past")}
    if counts["n_right"] + counts["n_wrong"] + counts["n_never"] != numel:
        raise _Malformed("counts")
    if one_d:
        sides, most = [1, -(-(shape[0] if shape else 1) // block[0])], WHERE_SIDE * WHERE_SIDE
    else:
        sides, most = [-(-shape[-2] // block[0]), -(-shape[-1] // block[1])], WHERE_SIDE
    codes = w.get("codes")
    if max(sides) > most or not isinstance(codes, list) or len(codes) != sides[0]:
        raise _Malformed("codes")
    for row in codes:
        if len(_ints(row, "codes", sides[1], RIGHT, NEVER)) != sides[1]:
            raise _Malformed("codes")
    past = _ints(w.get("past_end"), "past_end", min(WHERE_PAST, counts["n_past"]), 0, guards.GUARD - 1)
    return {"shape": shape, "block": block, "slice": index, "codes": codes, "past": past, **counts}


def _pool(grid: list, per: tuple) -> list:
    """``grid`` (rows of codes) pooled by ``per`` cells along (rows, columns): a cell takes the largest code among
    them, as compare.pool does; rows may be of different lengths."""
    if per == (1, 1):
        return grid
    out = []
    for top in range(0, len(grid), per[0]):
        band = grid[top:top + per[0]]
        width = max(len(r) for r in band)
        out.append([max(c for r in band for c in r[left:left + per[1]]) if any(len(r) > left for r in band)
                    else NONE for left in range(0, width, per[1])])
    return out


def _grid(m: dict) -> tuple:
    """(rows of codes to draw, the row in cells where the output's memory ends or None, notes): a 1-D output's strip
    with its writes past the end after the last element, wrapped into rows of WRAP cells; a larger output's map
    with, below its last row, the rows that its writes past the end would fill (drawn when the map shows the last
    slice, as drawing.py does)."""
    shape, block, past = m["shape"], m["block"], m["past"]
    if len(shape) <= 1:
        n, b = (shape[0] if shape else 1), block[0]
        cells = list(m["codes"][0])
        for at in ((n + off) // b for off in past):
            cells += [NONE] * (at + 1 - len(cells))
            cells[at] = PAST
        more = block_for(len(cells), WRAP * DRAWN_SIDE)
        cells = _pool([cells], (1, more))[0]
        grid = [cells[i:i + WRAP] for i in range(0, len(cells), WRAP)]
        notes = [f"output of {n:,} element{'s' if n != 1 else ''}"]
        if len(grid) > 1:
            notes.append(f"wrapped into rows of {WRAP * b * more:,} elements")
        if b * more > 1:
            notes.append(f"a cell is {b * more:,} elements, coloured by its worst")
        return grid, None, notes
    rows, cols = shape[-2:]
    grid = [list(r) for r in m["codes"]]
    notes = [f"output {'x'.join(map(str, shape))}"]
    if m["slice"]:
        which = "the first with a wrong element" if m["n_wrong"] + m["n_never"] else "the last"
        notes.append(f"slice [{', '.join(map(str, m['slice']))}, :, :], {which}")
    last = all(i == s - 1 for i, s in zip(m["slice"], shape[:-2]))
    end = None
    if past and last:
        for off in past:
            at_r, at_c = (rows + off // cols) // block[0], (off % cols) // block[1]
            grid += [[NONE] * len(grid[0]) for _ in range(at_r + 1 - len(grid))]
            grid[at_r][at_c] = PAST
        notes.append("below the line: memory after the output's last element, in rows of its width")
    elif past:
        notes.append(f"{m['n_past']:,} element(s) written past the end of the last slice, not drawn here")
    more = (block_for(len(grid), DRAWN_SIDE), block_for(len(grid[0]), DRAWN_SIDE))
    grid = _pool(grid, more)
    if past and last:
        end = rows / (block[0] * more[0])
    per = (block[0] * more[0], block[1] * more[1])
    if per != (1, 1):
        notes.append(f"a cell is {per[0]:,}x{per[1]:,} elements, coloured by its worst")
    return grid, end, notes


def _svg(grid: list, end) -> str:
    """The cells of ``grid`` as an inline SVG, one path per colour made of each row's runs of a code; a line at row
    ``end`` (in cells) where the output's memory ends."""
    rows, cols = len(grid), max(len(r) for r in grid)
    px = max(2, min(CELL_PX, PICTURE_PX // cols))
    runs: dict = {code: [] for code in (RIGHT, WRONG, NEVER, PAST)}
    for y, row in enumerate(grid):
        x = 0
        while x < len(row):
            stop = x
            while stop < len(row) and row[stop] == row[x]:
                stop += 1
            if row[x] != NONE:
                runs[row[x]].append(f"M{x} {y}h{stop - x}v1h{x - stop}z")
            x = stop
    paths = "".join(f"<path fill=\"{COLOURS[c]}\" d=\"{''.join(d)}\"/>" for c, d in runs.items() if d)
    line = (f"<line x1=\"0\" y1=\"{end:g}\" x2=\"{cols}\" y2=\"{end:g}\" stroke=\"#000000\" stroke-width=\"2\" "
            f"vector-effect=\"non-scaling-stroke\"/>" if end is not None else "")
    return (f"<svg class=\"where\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{cols * px}\" height=\"{rows * px}\" "
            f"viewBox=\"0 0 {cols} {rows}\" preserveAspectRatio=\"none\" shape-rendering=\"crispEdges\" role=\"img\" "
            f"aria-label=\"where the output is wrong\"><rect width=\"{cols}\" height=\"{rows}\" "
            f"fill=\"{COLOURS[NONE]}\" stroke=\"#888888\" vector-effect=\"non-scaling-stroke\"/>{paths}{line}</svg>")


def _where(w) -> str:
    """The picture of a failed case's where map, its notes above and its legend (each category's colour, name and
    exact count) below; a line saying why not where the map is malformed."""
    try:
        m = _checked(w)
    except _Malformed as exc:
        return (f"<p>The picture of where the output is wrong is not shown: this case's map in the report is "
                f"malformed ({html_text(str(exc))}).</p>")
    grid, end, notes = _grid(m)
    counts = {RIGHT: m["n_right"], WRONG: m["n_wrong"], NEVER: m["n_never"]}
    if m["n_past"]:
        counts[PAST] = m["n_past"]
    if len(m["past"]) < m["n_past"] and (len(m["shape"]) <= 1 or end is not None):
        notes.append(f"the first {len(m['past'])} of the writes past the end are drawn")
    keys = "".join(f"<span><svg width=\"12\" height=\"12\" aria-hidden=\"true\"><rect width=\"12\" height=\"12\" "
                   f"fill=\"{COLOURS[c]}\" stroke=\"#888888\"/></svg>{html.escape(NAMES[c])}: {n:,}</span>"
                   for c, n in counts.items())
    return (f"<p>Where the output is wrong ({html_text('; '.join(notes))}):</p>{_svg(grid, end)}"
            f"<p class=\"legend\">{keys}</p>")


def _perf(perf: dict) -> str:
    met = "the speed target was met" if perf.get("met") else "below the speed target"
    return f"<h2>Speed</h2><p>{html_text(perf.get('text') or 'measured')} ({met})</p>"


def _num(value, spec: str) -> str:
    return "?" if not isinstance(value, (int, float)) or isinstance(value, bool) else format(value, spec)


def _profile(profile: dict) -> str:
    """The Nsight Compute summary of the timed call (``gpucourse grade --profile``, profile.py): a row per kernel
    (the longest first), or the line saying why it was not profiled."""
    if not profile.get("ok"):
        return f"<h2>Profile</h2><p>Not profiled: {html_text(profile.get('why') or 'unknown')}</p>"
    rows = []
    for k in profile.get("kernels") or []:
        stalls = ", ".join(f"{html_text(s.get('reason', '?'))} {_num(s.get('value'), '.3g')}"
                           for s in k.get("stalls") or []) or "none reported"
        cells = [html_text(k.get("name", "?")), _num(k.get("duration_us"), ",.1f"), _num(k.get("dram_pct"), ".0f"),
                 _num(k.get("sm_pct"), ".0f"), _num(k.get("occupancy_pct"), ".0f"), _num(k.get("registers"), ".0f"),
                 stalls]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    unit = next((k.get("stall_unit") for k in profile.get("kernels") or [] if k.get("stall_unit")), "")
    launched = profile.get("launched")
    more = (f" {launched} kernels ran in the call; the {len(rows)} longest are shown."
            if isinstance(launched, int) and launched > len(rows) else "")
    return ("<h2>Profile</h2><p>Your timed call, run once more under Nsight Compute (its clocks, not the timing's: "
            f"the times differ from the speed above).{html_text(more)}</p>"
            "<table><thead><tr><th>kernel</th><th>time (us)</th><th>DRAM throughput (% of peak)</th>"
            "<th>SM throughput (% of peak)</th><th>achieved occupancy (%)</th><th>registers per thread</th>"
            f"<th>top stall reasons ({html_text(unit or 'as ncu counts them')})</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def page(result: dict, exercise: str, student: str, assignment: str = "", environment: dict | None = None) -> str:
    """The feedback page of one graded submission: ``result`` as the JSON report holds it (``submission``,
    ``status``, ``score``, ``message``, ``checks``, ``flags``, optionally ``perf``), for ``student``'s
    ``assignment`` (default: the exercise). ``environment``: the report's, for the line saying where it was graded."""
    checks = list(result.get("checks") or [])
    n_pass = sum(bool(c.get("passed")) for c in checks)
    status = str(result.get("status", "?"))
    title = f"{html_text(exercise)}: feedback for {html_text(student)}"
    facts = [("Student", student), ("Assignment", assignment or exercise), ("Exercise", exercise),
             ("Submission", os.path.basename(str(result.get("submission", "")))),
             ("Score", f"{float(result.get('score', 0.0)):.2f}"),
             ("Cases", f"{n_pass} of {len(checks)} passed" if checks else "none was run")]
    rows = "".join(f"<tr><th>{k}</th><td>{html_text(v)}</td></tr>" for k, v in facts)
    body = [f"<h1>{title}</h1>",
            f"<p>Status: <strong class=\"{html_text(status)}\">{html_text(status)}</strong></p>",
            f"<table>{rows}</table>", f"<h2>Message</h2>{_detail(result.get('message', ''))}"]
    flags = result.get("flags") or []
    if flags:
        items = "".join(f"<li>{html_text(f)}</li>" for f in flags)
        body.append(f"<h2>Flags</h2><p>({FLAGS_NOTE})</p><ul>{items}</ul>")
    body.append("<h2>Cases</h2>")
    body += [_case(c) for c in checks] or ["<p>No case was run: the message above says why.</p>"]
    if isinstance(result.get("perf"), dict):
        body.append(_perf(result["perf"]))
    if isinstance(result.get("profile"), dict):
        body.append(_profile(result["profile"]))
    meanings = "".join(f"<li><strong>{k}</strong>: {html.escape(v)}</li>" for k, v in STATUSES.items())
    where = f"Graded on {environment.get('fingerprint', '?')}. " if environment else ""
    body.append(f"<footer><p>{html_text(where)}Statuses:</p><ul>{meanings}</ul><p>Lines starting with "
                f"<span class=\"hint\">hint:</span> are the checker's guess at the likely cause.</p></footer>")
    return _head(title) + "\n".join(body) + "\n</body></html>\n"


def _href(relative: str) -> str:
    return html.escape(urllib.parse.quote(relative.replace(os.sep, "/")), quote=True)


def index_page(exercise: str, written: list, ungraded: list, earlier: list) -> str:
    """``DIR/index.html``: this batch's pages (``written``: dicts with ``student``, ``assignment``, ``status``,
    ``score``, ``page`` relative to DIR), the students given no grade and why (``ungraded``: (student, why): no file,
    or several, each with its page), and pages already in DIR from earlier batches (``earlier``: paths relative to
    DIR), kept and linked."""
    title = f"Feedback: {html_text(exercise)}"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = "".join(f"<tr><td><a href=\"{_href(w['page'])}\">{html_text(w['student'])}</a></td>"
                   f"<td>{html_text(w['assignment'])}</td><td class=\"{html_text(w['status'])}\">"
                   f"{html_text(w['status'])}</td><td>{w['score']:.2f}</td></tr>" for w in written)
    body = [f"<h1>{title}</h1>", f"<p>{len(written)} page{'s' if len(written) != 1 else ''} written {date}.</p>",
            "<table><thead><tr><th>student</th><th>assignment</th><th>status</th><th>score</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"]
    if ungraded:
        items = "".join(f"<li>{html_text(s)}: {html_text(why)}</li>" for s, why in ungraded)
        body.append(f"<h2>Students given no grade</h2><ul>{items}</ul>")
    if earlier:
        items = "".join(f"<li><a href=\"{_href(p)}\">{html_text(p)}</a></li>" for p in earlier)
        body.append(f"<h2>Pages from earlier batches</h2><p>(kept as they were)</p><ul>{items}</ul>")
    return _head(title) + "\n".join(body) + "\n</body></html>\n"


def _pages_in(directory: str) -> list:
    """The pages already under ``directory`` where this module puts them (``<student>/<assignment>/<page>.html``),
    relative to it, sorted."""
    found = []
    for student in sorted(os.listdir(directory)):
        top = os.path.join(directory, student)
        if not os.path.isdir(top):
            continue
        for assignment in sorted(os.listdir(top)):
            folder = os.path.join(top, assignment)
            if os.path.isdir(folder):
                found += [os.path.join(student, assignment, f) for f in sorted(os.listdir(folder))
                          if f.endswith(".html")]
    return found


class _Names:
    """Distinct folder and file names: two students whose names give the same :func:`safe_name` (``a b`` and
    ``a_b``) get two folders (``a_b``, ``a_b-2``); a name is compared as a case-insensitive file system would."""

    def __init__(self, reserved: tuple = ()):
        self.given: dict = {}
        self.taken = {r.lower() for r in reserved}

    def get(self, key, wanted: str) -> str:
        if key not in self.given:
            name, n = wanted, 1
            while name.lower() in self.taken:
                n += 1
                stem, ext = os.path.splitext(wanted)
                name = f"{stem}-{n}{ext}"
            self.taken.add(name.lower())
            self.given[key] = name
        return self.given[key]


def write(report: dict, entries: list, directory: str) -> list:
    """Write a page per result of ``report`` to ``directory`` (created if needed), and its index.

    ``entries``: the batch's ``gradebook.Entry`` list, whose files (``gradebook.to_grade``) are the report's results,
    in that order; they name the student and the assignment. An ambiguous student's files, each graded, get a page
    each, named after the file. A page names the environment its result was graded in: the result's own where it has
    one (a merge of shards graded in different environments, merge.py), else the report's. Returns the pages written
    (paths under ``directory``), in the report's order."""
    exercise = str(report["exercise"])
    results = report["results"]
    paths = gradebook.to_grade(entries)
    if [r["submission"] for r in results] != paths:
        raise ValueError("feedback.write: the report's results are not the entries' files in order")
    os.makedirs(directory, exist_ok=True)
    before = set(_pages_in(directory))
    shown = gradebook.names(entries)
    students = _Names(reserved=(INDEX,))
    files: dict = {}  # (student folder, assignment folder) -> _Names of its pages
    written, ungraded, out = [], [], []
    graded = iter(results)
    for e in entries:
        own = [e.path] if e.path is not None else e.candidates
        if e.path is None:
            ungraded.append((e.student, e.problem or e.status or "not graded"))
        for path in own:
            r = next(graded)
            assignment = e.assignment or exercise
            folder = (students.get(e.student, safe_name(e.student)), safe_name(assignment))
            stem = exercise if e.path is not None else f"{exercise}-{os.path.basename(path)}"
            name = files.setdefault(folder, _Names()).get(len(out), safe_name(stem) + ".html")
            relative = os.path.join(*folder, name)
            target = os.path.join(directory, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as f:
                f.write(page(r, exercise, shown.get(path, e.student), assignment,
                             r.get("environment") or report.get("environment")))
            out.append(target)
            written.append({"student": shown.get(path, e.student), "assignment": assignment, "page": relative,
                            "status": r["status"], "score": float(r["score"])})
    earlier = sorted(before - {w["page"] for w in written})
    with open(os.path.join(directory, INDEX), "w", encoding="utf-8") as f:
        f.write(index_page(exercise, written, ungraded, earlier))
    return out
