"""A workshop leaderboard: the passing submissions of one graded batch ranked by measured speed, as a page an
instructor can project (Markdown or HTML).

Where the numbers come from: on a GPU the grader times each passing submission alone (the GPU's exclusive lock, see
grader.py) on the same inputs, next to the exercise's baseline (the reference, or a torch copy of the same bytes),
and keeps the result in ``result["perf"]``: ``ratio`` (the speed relative to the baseline), and where the worker
reports them the median and quartiles of the submission's own times (``ms``, ``q25_ms``, ``q75_ms``) and its share of
the copy or compute ceiling (``pct_of_peak``). Two submissions whose middle halves (25th to 75th percentile) overlap
are within each other's noise: they share a rank, shown as ``=2``, as ``timing.Comparison`` calls such a pair a tie.
Without quartiles the page ranks by ratio and says ties cannot be told.

Not ranked, and said why: a speed above the device's physical limit (a timing error or a forged report), a speed
that could not be measured, and anything flagged for a human. Speeds are measured inside each submission's own
worker (self-reported, see grader.py's limits), so the page says so. In CPU mode nothing is timed: the page says that
and lists the passing submissions without a rank.

Names come from paths a student controls: every name and message is escaped for the page (Markdown punctuation
backslash-escaped, HTML escaped, control characters shown as escapes); the HTML page has no script and a content
security policy that allows none.
"""
from __future__ import annotations

import datetime
import html
import os
import string

from .safe_text import printable

_MD_SPECIAL = set(string.punctuation)


def md_text(text) -> str:
    """``text`` as literal Markdown: every ASCII punctuation character backslash-escaped (CommonMark allows it for
    all of them), so a name cannot open a link, an HTML tag, a table cell or emphasis."""
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in printable(text))


def html_text(text) -> str:
    return html.escape(printable(text), quote=True)


def _number(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if x == x and abs(x) != float("inf") else None


def _spread(perf: dict) -> tuple | None:
    ms, lo, hi = (_number(perf.get(k)) for k in ("ms", "q25_ms", "q75_ms"))
    if ms is None or lo is None or hi is None or not (0 < lo <= ms <= hi):
        return None
    return ms, lo, hi


def board(report: dict, names: dict | None = None) -> dict:
    """The leaderboard as data: ``{"exercise", "mode", "environment", "graded", "passed", "ranked": [rows],
    "unranked": [(name, why)], "unranked_passing": [names] (CPU mode), "ties_known": bool}``. A row is
    ``{"rank", "tied", "name", "ratio", "ms", "q25_ms", "q75_ms", "pct_of_peak", "baseline", "met"}``.
    ``names`` maps a submission's path to the name shown (the student), default the file's name."""
    names = names or {}
    env = report.get("environment", {})
    results = report.get("results", [])
    passing = [r for r in results if r.get("status") == "passed"]

    def name(r):
        return names.get(r["submission"]) or os.path.basename(r["submission"])

    out = {"exercise": report.get("exercise", "?"), "mode": env.get("mode", "?"), "environment": env,
           "graded": len(results), "passed": len(passing), "ranked": [], "unranked": [], "unranked_passing": [],
           "ties_known": True}
    if env.get("mode") != "gpu":
        out["unranked_passing"] = sorted(name(r) for r in passing)
        return out
    candidates = []
    for r in passing:
        perf = r.get("perf")
        flags = r.get("flags") or []
        ratio = _number(perf.get("ratio")) if isinstance(perf, dict) else None
        if any("above the device's physical limit" in f for f in flags) or (isinstance(perf, dict)
                                                                             and perf.get("suspicious")):
            out["unranked"].append((name(r), "speed above the device's physical limit: a timing error or a forged "
                                             "report, for a human to look at"))
        elif ratio is None or ratio <= 0:
            why = next((f for f in flags if f.startswith("speed could not be measured")), "no speed was measured")
            out["unranked"].append((name(r), why))
        elif any(not f.startswith("below the speed target") for f in flags):
            out["unranked"].append((name(r), "flagged for a human to look at first: " + "; ".join(
                f for f in flags if not f.startswith("below the speed target"))[:200]))
        else:
            candidates.append((r, perf, ratio))
    spreads = [_spread(p) for _, p, _ in candidates]
    out["ties_known"] = all(s is not None for s in spreads)
    if out["ties_known"]:
        order = sorted(range(len(candidates)), key=lambda i: (spreads[i][0], name(candidates[i][0])))
    else:
        order = sorted(range(len(candidates)), key=lambda i: (-candidates[i][2], name(candidates[i][0])))
    rank, group_hi = 0, None
    for pos, i in enumerate(order):
        r, perf, ratio = candidates[i]
        s = spreads[i]
        tied = out["ties_known"] and group_hi is not None and s[1] <= group_hi
        if not tied:
            rank, group_hi = pos + 1, None
        if s is not None:
            group_hi = s[2] if group_hi is None else max(group_hi, s[2])
        out["ranked"].append({"rank": rank, "tied": False, "name": name(r), "ratio": ratio,
                              "ms": s[0] if s else None, "q25_ms": s[1] if s else None, "q75_ms": s[2] if s else None,
                              "pct_of_peak": _number(perf.get("pct_of_peak")),
                              "baseline": str(perf.get("baseline") or "the baseline"), "met": bool(perf.get("met"))})
    counts: dict = {}
    for row in out["ranked"]:
        counts[row["rank"]] = counts.get(row["rank"], 0) + 1
    for row in out["ranked"]:
        row["tied"] = counts[row["rank"]] > 1
    return out


def _rank_text(row: dict) -> str:
    return f"={row['rank']}" if row["tied"] else str(row["rank"])


def _time_text(row: dict) -> str:
    if row["ms"] is None:
        return "not reported"
    return f"{row['ms']:.3f} ms ({row['q25_ms']:.3f}-{row['q75_ms']:.3f})"


def _ratio_text(row: dict) -> str:
    return f"{row['ratio']:.2f}x {row['baseline']}"


def _pct_text(row: dict) -> str:
    return f"{row['pct_of_peak']:.0f}%" if row["pct_of_peak"] is not None else "-"


def _lines(b: dict) -> dict:
    """The page's sentences: the course's own text and the environment's values (no student's text: Markdown takes
    them as they are, HTML escapes them)."""
    env = b["environment"]
    where = (f"{env.get('gpu') or 'CPU'}, torch {env.get('torch', '?')}, triton {env.get('triton') or '-'}"
             + (f", driver {env['driver']}" if env.get("driver") else ""))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = f"{b['passed']} of {b['graded']} submissions passed every correctness check. Graded on {where}, {date}."
    if b["mode"] != "gpu":
        how = ("CPU mode: no speed was measured (the grader times submissions only on a GPU), so there is no "
               "ranking. The passing submissions, alphabetically:")
        notes = []
    else:
        how = ("Each passing submission was timed alone on the same GPU (no other grading job ran on it meanwhile), "
               "on the same inputs, next to the exercise's baseline. Time: median (25th-75th percentile).")
        notes = []
        if b["ties_known"]:
            notes.append("=N: a tie, the middle halves of their times overlap: within the measured noise, the order "
                         "between them could flip on a rerun.")
        else:
            notes.append("Ties cannot be told: the grader did not report the spread of the times, so close ratios "
                         "may be noise.")
        notes.append("Speeds are measured inside each submission's own worker process (see gpucourse grade "
                     "--help), so code written to forge its timing could; what is unranked or flagged is for a "
                     "human to look at before a prize is given.")
    return {"head": head, "how": how, "notes": notes}


def markdown(b: dict) -> str:
    t = _lines(b)
    out = [f"# Leaderboard: {md_text(b['exercise'])}", "", t["head"], "", t["how"], ""]  # the prose is the course's
    if b["mode"] != "gpu":
        out += [f"- {md_text(n)}" for n in b["unranked_passing"]] or ["(none passed)"]
        return "\n".join(out) + "\n"
    if b["ranked"]:
        out += ["| rank | student | time | speed | % of ceiling | target |", "|---:|---|---:|---:|---:|:---:|"]
        out += [f"| {_rank_text(r)} | {md_text(r['name'])} | {_time_text(r)} | {_ratio_text(r)} | {_pct_text(r)} "
                f"| {'met' if r['met'] else 'below'} |" for r in b["ranked"]]
    else:
        out.append("No passing submission has a measured speed to rank.")
    if b["unranked"]:
        out += ["", "Passed but not ranked:", ""] + [f"- {md_text(n)}: {md_text(why)}" for n, why in b["unranked"]]
    for note in t["notes"]:
        out += ["", note]
    return "\n".join(out) + "\n"


_CSS = ("body{font-family:system-ui,sans-serif;font-size:1.6rem;margin:2rem 4rem}"
        "table{border-collapse:collapse}td,th{padding:.3em .9em;border-bottom:1px solid #ccc;text-align:right}"
        "td.name,th.name{text-align:left}.tie{color:#a60}small{color:#555}")


def html_page(b: dict) -> str:
    return html_document(html_title(b), html_body(b))


def html_title(b: dict) -> str:
    return f"Leaderboard: {html_text(b['exercise'])}"


def html_document(title: str, body: list) -> str:
    """A self-contained page (no scripts, no outside resources) holding the HTML fragments ``body``."""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{title}</title><style>{_CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def html_body(b: dict) -> list:
    """The fragments of a board's page, heading first (one page may hold several boards: merge.py)."""
    t = _lines(b)
    body = [f"<h1>{html_title(b)}</h1>", f"<p>{html_text(t['head'])}</p>", f"<p>{html_text(t['how'])}</p>"]
    if b["mode"] != "gpu":
        items = "".join(f"<li>{html_text(n)}</li>" for n in b["unranked_passing"])
        body.append(f"<ul>{items}</ul>" if items else "<p>(none passed)</p>")
    elif b["ranked"]:
        head = ("<tr><th>rank</th><th class=name>student</th><th>time</th><th>speed</th><th>% of ceiling</th>"
                "<th>target</th></tr>")
        rows = "".join(
            f"<tr{' class=tie' if r['tied'] else ''}><td>{html_text(_rank_text(r))}</td>"
            f"<td class=name>{html_text(r['name'])}</td><td>{html_text(_time_text(r))}</td>"
            f"<td>{html_text(_ratio_text(r))}</td><td>{html_text(_pct_text(r))}</td>"
            f"<td>{'met' if r['met'] else 'below'}</td></tr>" for r in b["ranked"])
        body.append(f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>")
    else:
        body.append("<p>No passing submission has a measured speed to rank.</p>")
    if b["mode"] == "gpu" and b["unranked"]:
        items = "".join(f"<li>{html_text(n)}: {html_text(why)}</li>" for n, why in b["unranked"])
        body.append(f"<p>Passed but not ranked:</p><ul>{items}</ul>")
    body += [f"<p><small>{html_text(n)}</small></p>" for n in t["notes"]]
    return body


def write(report: dict, path: str, names: dict | None = None) -> None:
    """Write the leaderboard of ``report`` to ``path``: HTML for .html/.htm, Markdown otherwise."""
    b = board(report, names)
    text = html_page(b) if path.lower().endswith((".html", ".htm")) else markdown(b)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
