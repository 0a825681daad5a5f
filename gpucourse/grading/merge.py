"""``gpucourse grade merge SHARD.json [SHARD.json ...] [--json PATH] [--csv PATH] [--gradebook PATH] [--summary PATH]
[--leaderboard PATH ...] [--feedback DIR] [--points P]``: the class's outputs from the JSON reports of the N shards of
one batch (``gpucourse grade ... --shard K/N --json PATH``, shards.py), as one machine grading the whole class writes
them.

The shards' results and students are joined in the class's order (each shard's students record their place in it),
and the existing writers write the outputs: report.write_json and write_csv, gradebook.write (an assignment's
through gradebook.assignment_book), summary.write, leaderboard.write, feedback.write. An assignment's shards wrote one
report per exercise (``0-vector_add.json``...): give them all; the gradebook has a row per student, the other outputs
are written per exercise (``--json r.json`` -> ``r-vector_add.json``; the feedback pages into the one DIR, exercise
after exercise), as ``gpucourse grade`` does.

Feedback: a page shows what the JSON report holds of a submission (status, score, message, flags, every case's verdict
and checker text with its hints, the speed, the ``--profile`` summary), so the merged pages are a one-machine run's,
byte for byte, but for the date on DIR/index.html; where the shards ran in different environments, each page names
the one its submission was graded in.

Refused (exit 2, before anything is written), with a message saying what is wrong: a file that is not a shard's
report, shards of different exercises or assignments or of a different N, a shard given twice or missing, a student
in two shards, shards that saw different classes, and shards graded at different isolation levels, unless
``--allow-process-isolation`` accepts the process-level results for points, as it does for ``gpucourse grade``; with
``--feedback``, a shard whose results lack what a page shows (``page_detail``), and a DIR that is a file.

Speed: the leaderboard ranks the merged list, so ties are judged among all the class's timings, not per shard. A
timing is only comparable on the GPU model it was measured on, and each shard's report names its device: where the
shards ran on different GPU models, each model is ranked apart, one table each, and the page says so.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from . import batch, feedback, gradebook, leaderboard, sandbox, summary
from .report import write_csv, write_json


class MergeError(ValueError):
    """The shards cannot be merged into one class's outputs; the message says why and what to do."""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpucourse grade merge", description="Join the JSON reports of the N shards of "
                                 "a batch (gpucourse grade ... --shard K/N --json PATH) into the outputs one machine "
                                 "grading the whole class would write.", epilog="docs/grading.md, 'Grading across "
                                 "machines (Slurm)', has a Slurm job-array recipe.")
    ap.add_argument("shards", nargs="+", metavar="SHARD.json",
                    help="every shard's --json report (an assignment: every exercise's report of every shard)")
    ap.add_argument("--json", metavar="PATH", help="write the merged report as JSON")
    ap.add_argument("--csv", metavar="PATH", help="write one row per submission as CSV")
    ap.add_argument("--gradebook", metavar="PATH", help="write one row per student as CSV, and the environment in "
                                                         "PATH's .env.json")
    ap.add_argument("--replace-gradebook", action="store_true",
                    help="write --gradebook anew even where the existing file lists students the shards do not "
                         "grade, or is another exercise's")
    ap.add_argument("--summary", metavar="PATH", help="write the class summary (Markdown) to PATH (default: beside "
                                                      "--gradebook, as <its stem>-summary.md)")
    ap.add_argument("--leaderboard", metavar="PATH", action="append", default=[],
                    help="write a leaderboard page (.md Markdown, .html HTML), one table per GPU model; may be given "
                         "twice")
    ap.add_argument("--feedback", metavar="DIR",
                    help="write a self-contained HTML page per graded submission, to hand back to its student, as "
                         "DIR/<student>/<assignment>/<exercise>.html, and DIR/index.html listing them, as gpucourse "
                         "grade --feedback does")
    ap.add_argument("--points", type=float, default=gradebook.DEFAULT_POINTS, metavar="P",
                    help=f"the gradebook's max points per student (default {gradebook.DEFAULT_POINTS:g})")
    ap.add_argument("--allow-process-isolation", action="store_true",
                    help="accept results graded without the sandbox for points and ranking, as gpucourse grade's "
                         "option does (also where some shards ran in the sandbox and others did not)")
    return ap


def _usage_error(message: str) -> int:
    print(f"gpucourse grade merge: error: {message}", file=sys.stderr)
    return 2


def load(paths: list) -> list:
    """[(path, report)] of the shards' JSON reports; MergeError for a file that is not one."""
    out = []
    for path in paths:
        where = gradebook.printable(path)
        try:
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
        except OSError as exc:
            raise MergeError(f"{where}: cannot be read ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise MergeError(f"{where}: not a JSON report ({exc})") from None
        shard = report.get("shard") if isinstance(report, dict) else None
        if not (isinstance(shard, dict) and isinstance(shard.get("k"), int) and isinstance(shard.get("n"), int)
                and isinstance(report.get("results"), list) and isinstance(report.get("entries"), list)):
            raise MergeError(f"{where} is not a shard's report (no \"shard\": {{\"k\": K, \"n\": N}} in it): grade "
                             f"each shard with gpucourse grade ... --shard K/N --json PATH, and merge those")
        out.append((path, report))
    return out


def _name(path: str, report: dict) -> str:
    return f"{gradebook.printable(path)} (shard {report['shard']['k']}/{report['shard']['n']})"


def plan(loaded: list) -> tuple:
    """(workbook or None, [exercise ids in order], {exercise: [(path, report)] by shard}) of shards that belong
    together; MergeError naming what does not."""
    path0, first = loaded[0]
    n = first["shard"]["n"]
    for path, r in loaded:
        if r["shard"]["n"] != n:
            raise MergeError(f"shards of different batches: {_name(path0, first)} is one of {n} shards and "
                             f"{_name(path, r)} one of {r['shard']['n']}: merge the shards of one --shard K/N batch")
    workbooks = {r.get("assignment") for _, r in loaded}
    if len(workbooks) > 1:
        said = "; ".join(f"{_name(p, r)}: {'assignment ' + r['assignment'] if r.get('assignment') else 'exercise '}"
                         f"{'' if r.get('assignment') else r.get('exercise')}" for p, r in loaded)
        raise MergeError(f"shards of different assignments or exercises ({said}): merge each one's shards on its own")
    workbook = workbooks.pop()
    if workbook:
        ids = list(first.get("exercises") or [])
        for path, r in loaded:
            if list(r.get("exercises") or []) != ids or r.get("exercise") not in ids:
                raise MergeError(f"{_name(path, r)} is not of assignment {workbook}'s exercises ({', '.join(ids)}) "
                                 f"as {_name(path0, first)} lists them")
    else:
        ids = [first.get("exercise")]
        other = [(p, r) for p, r in loaded if r.get("exercise") != ids[0]]
        if other:
            p, r = other[0]
            raise MergeError(f"shards of different exercises: {_name(path0, first)} grades {ids[0]} and "
                             f"{_name(p, r)} grades {r.get('exercise')}: merge each exercise's shards on its own")
    groups = {}
    for ex in ids:
        mine = sorted(((p, r) for p, r in loaded if r.get("exercise") == ex), key=lambda pr: pr[1]["shard"]["k"])
        of = f" of exercise {ex}" if workbook else ""
        seen: dict = {}
        for p, r in mine:
            k = r["shard"]["k"]
            if k in seen:
                raise MergeError(f"shard {k}/{n}{of} given twice: {gradebook.printable(seen[k])} and "
                                 f"{gradebook.printable(p)}")
            seen[k] = p
        missing = [k for k in range(n) if k not in seen]
        if missing:
            raise MergeError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{k}/{n}' for k in missing)}{of} "
                             f"missing: a merge needs all {n} shards' reports (given: "
                             f"{', '.join(f'{k}/{n}' for k in sorted(seen)) or 'none'}); a shard with no student "
                             f"writes its report too, so look for the job that failed")
        _students(mine, of)
        groups[ex] = mine
    return workbook, ids, groups


def _students(shards: list, of: str) -> None:
    """MergeError where a student is in two shards, or the shards saw classes of different sizes."""
    where: dict = {}
    for path, r in shards:
        for e in r["entries"]:
            student = e.get("student")
            if student in where and where[student] != path:
                raise MergeError(f"student {gradebook.printable(student)}{of} is in two shards: "
                                 f"{_name(where[student], dict(shards)[where[student]])} and {_name(path, r)}; "
                                 f"each student belongs to one shard: were these shards graded from different "
                                 f"class lists, or is one a copy of another?")
            where[student] = path
    sizes = {r["shard"].get("class_students") for _, r in shards}
    got = sum(r["shard"].get("students", 0) for _, r in shards)
    if len(sizes) > 1 or got != next(iter(sizes)):
        said = ", ".join(f"{_name(p, r)}: {r['shard'].get('students')} of {r['shard'].get('class_students')}"
                         for p, r in shards)
        raise MergeError(f"the shards{of} saw different classes ({said}): grade every shard from the same "
                         f"submissions")


# What a feedback page shows of a result (feedback.page), and of each of its cases.
PAGE_FIELDS = {"submission": str, "status": str, "score": (int, float), "message": str, "checks": list, "flags": list}
CASE_FIELDS = ("name", "passed", "detail")


def page_detail(shards: list, of: str = "") -> None:
    """MergeError naming the shard whose report lacks what ``--feedback``'s pages show: each result's submission,
    status, score, message, flags and cases (each with its name, verdict and the checker's text), its results being
    its students' files in order, as feedback.write pairs them."""
    for path, r in shards:
        where = f"{_name(path, r)}{of}"
        results = r["results"]
        if not all(isinstance(res, dict) for res in results):
            raise MergeError(f"{where}: its \"results\" are not a report's: --feedback cannot write their pages")
        files = gradebook.to_grade([_entry(d) for d in r["entries"]])
        if [res.get("submission") for res in results] != files:
            raise MergeError(f"{where}: its results are not its students' files (\"entries\") in order, so no "
                             f"feedback page can be given its student: merge the report its shard wrote")
        for res in results:
            lacks = [k for k, kind in PAGE_FIELDS.items() if not isinstance(res.get(k), kind)]
            cases = res.get("checks") if isinstance(res.get("checks"), list) else []
            if any(not isinstance(c, dict) or any(k not in c for k in CASE_FIELDS) for c in cases):
                lacks.append("each case's " + ", ".join(CASE_FIELDS[:-1]) + " and " + CASE_FIELDS[-1])
            if lacks:
                raise MergeError(f"{where} lacks what a feedback page shows: its result for "
                                 f"{gradebook.printable(res.get('submission'))} is missing {', '.join(lacks)}; "
                                 f"re-grade that shard (gpucourse grade ... --shard K/N --json PATH) and merge its "
                                 f"new report, or merge without --feedback")


def _isolation(shards: list, allow: bool) -> tuple:
    """(isolation dict, standing dict) of the merged batch, from the shards that graded something; MergeError where
    they were graded at different levels and the process-level results are not accepted."""
    graded = [(p, r) for p, r in shards if r["results"]] or shards
    levels: dict = {}
    for p, r in graded:
        levels.setdefault(r.get("isolation", {}).get("level", "process"), []).append(_name(p, r))
    if len(levels) == 1:
        level = next(iter(levels))
        iso = sandbox.Isolation(level, graded[0][1]["isolation"].get("detail", ""))
        accepted = allow or all(r.get("standing", {}).get("for_points") for _, r in graded)
        return iso.to_dict(), batch.standing(iso, accepted)
    said = "; ".join(f"{level}: {', '.join(names)}" for level, names in sorted(levels.items()))
    if not allow:
        raise MergeError(f"shards graded at different isolation levels ({said}): the process-level ones could read "
                         f"the solved workbooks; grade every shard in the sandbox (--isolation bubblewrap), or pass "
                         f"--allow-process-isolation to accept them for points, as gpucourse grade does")
    iso = sandbox.Isolation("process", f"shards graded at different isolation levels ({said})")
    return iso.to_dict(), batch.standing(iso, True)


def _entry(d: dict) -> gradebook.Entry:
    fields = {f.name for f in dataclasses.fields(gradebook.Entry)}
    e = gradebook.Entry(**{k: v for k, v in d.items() if k in fields})
    e.index = d.get("index", 0)
    return e


def join(shards: list, allow: bool = False) -> tuple:
    """(merged report, entries) of one exercise's shards: the students and results in the class's order, the
    isolation and standing of the whole (``_isolation``); a result keeps its shard's environment where the shards'
    environments differ (CSV rows and the leaderboard's GPU models read it)."""
    entries = sorted((_entry(d) for _, r in shards for d in r["entries"]), key=lambda e: e.index)
    order = {}
    for e in entries:
        for j, p in enumerate([e.path] if e.path is not None else e.candidates):
            order.setdefault(p, (e.index, j))
    with_results = [r for _, r in shards if r["results"]] or [shards[0][1]]
    env = with_results[0]["environment"]
    mixed = len({r["environment"].get("fingerprint") for r in with_results}) > 1
    results = []
    for _, r in shards:
        for res in r["results"]:
            results.append(dict(res, environment=r["environment"]) if mixed else res)
    results.sort(key=lambda res: order.get(res["submission"], (len(entries), 0)))
    isolation, standing = _isolation(shards, allow)
    first = shards[0][1]
    report = {"exercise": first["exercise"], "environment": env, "isolation": isolation, "standing": standing,
              "results": results,
              "merged": {"n": first["shard"]["n"], "shards": [
                  {"file": p, "k": r["shard"]["k"], "device": r["shard"].get("device") or "CPU",
                   "students": r["shard"].get("students"), "fingerprint": r["environment"].get("fingerprint")}
                  for p, r in shards]},
              "entries": [dict(dataclasses.asdict(e), index=e.index) for e in entries]}
    if first.get("assignment"):
        report["assignment"], report["exercises"] = first["assignment"], first["exercises"]
    return report, entries


def _device(report: dict, result: dict) -> str:
    return (result.get("environment") or report["environment"]).get("gpu") or "CPU"


def by_device(report: dict) -> list:
    """[(GPU model, the report of its results only)], one per GPU model the shards ran on (CPU for CPU mode), in
    the order first seen: timings are only ranked against others of the same GPU model."""
    groups: dict = {}
    for r in report["results"]:
        groups.setdefault(_device(report, r), []).append(r)
    if len(groups) <= 1:
        return [(next(iter(groups), "CPU"), report)]
    return [(dev, dict(report, exercise=f"{report['exercise']} on {dev}", results=rs,
                       environment=rs[0].get("environment") or report["environment"]))
            for dev, rs in groups.items()]


PER_MODEL = ("Timings from different GPU models are never ranked together: the shards ran on {models}, so each "
             "model has a table of its own.")


def write_leaderboard(report: dict, path: str, names: dict) -> None:
    """leaderboard.write for one GPU model; for several, one page with a leaderboard per model, said at its top."""
    groups = by_device(report)
    if len(groups) == 1:
        leaderboard.write(report, path, names)
        return
    boards = [leaderboard.board(sub, names) for _, sub in groups]
    note = PER_MODEL.format(models=", ".join(dev for dev, _ in groups))
    if path.lower().endswith((".html", ".htm")):
        bodies = ["\n".join(leaderboard.html_body(b)) for b in boards]
        text = leaderboard.html_document(leaderboard.html_title(boards[0]),
                                         [f"<p>{leaderboard.html_text(note)}</p>", "\n<hr>\n".join(bodies)])
    else:
        text = note + "\n\n" + "\n".join(leaderboard.markdown(b) for b in boards)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def class_summary(report: dict, entries: list) -> dict:
    """summary.summarize of the merged report; where the shards ran on several GPU models, its leaderboard's top
    is each model's, ranked apart."""
    names = gradebook.names(entries)
    ungraded = [(e.student, e.status or "missing", e.problem) for e in entries if e.path is None]
    s = summary.summarize(report, names, ungraded)
    groups = by_device(report)
    if len(groups) > 1:
        tops, notes = [], [PER_MODEL.format(models=", ".join(dev for dev, _ in groups))]
        for dev, sub in groups:
            lb = summary.summarize(sub, names)["leaderboard"]
            tops += [(f"{rank} ({dev})", who, speed, time) for rank, who, speed, time in lb["top"]]
            notes += [f"{dev}: {lb['note']}"] if lb["note"] else []
        s["leaderboard"] = {"top": tops, "note": " ".join(notes)}
    return s


def main(argv=None) -> int:
    ap = _parser()
    try:
        args = ap.parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:  # argparse: --help exits 0, usage errors 2
        return int(exc.code or 0)
    from .cli import _derived

    if args.points <= 0:
        return _usage_error("--points must be > 0")
    for page in args.leaderboard:
        if not page.lower().endswith((".md", ".markdown", ".html", ".htm")):
            return _usage_error(f"--leaderboard {gradebook.printable(page)}: name it .md (Markdown) or .html")
    for out in [args.json, args.csv, args.gradebook, args.summary, *args.leaderboard]:
        if out and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            return _usage_error(f"{gradebook.printable(out)}: its folder does not exist")
    if args.feedback and os.path.exists(args.feedback) and not os.path.isdir(args.feedback):
        return _usage_error(f"--feedback {gradebook.printable(args.feedback)} is a file: name a folder")
    try:
        workbook, ids, groups = plan(load(args.shards))
        if args.feedback:
            for ex in ids:
                page_detail(groups[ex], f" (exercise {ex})" if workbook else "")
        merged = [(ex, *join(groups[ex], args.allow_process_isolation)) for ex in ids]
        for ex, report, entries in merged if args.feedback else []:
            if [r["submission"] for r in report["results"]] != gradebook.to_grade(entries):
                raise MergeError(f"the shards' results{' of exercise ' + ex if workbook else ''} do not join into "
                                 f"their students' files in the class's order (a file graded for two students?), "
                                 f"so no feedback page can be given its student: merge without --feedback")
    except MergeError as exc:
        return _usage_error(str(exc))
    standing = merged[0][1]["standing"]
    if not standing["for_points"] and (args.gradebook or args.leaderboard):
        return _usage_error(f"no --gradebook or --leaderboard: {standing['why']}")
    several = workbook is not None
    key, points_total = (workbook, args.points * len(ids)) if several else (ids[0], args.points)
    if args.gradebook and os.path.exists(args.gradebook) and not args.replace_gradebook:
        try:
            existing = gradebook.read_existing(args.gradebook, gradebook.assignment_columns(ids) if several
                                               else gradebook.COLUMNS)
        except gradebook.LayoutError as exc:
            return _usage_error(str(exc))
        refused = gradebook.refusal(existing, merged[0][2], key, points_total, False)
        if refused:
            return _usage_error(refused)
    p = gradebook.printable
    for ex, report, entries in merged:
        out = lambda path: _derived(path, ex, several)  # noqa: E731
        shards = report["merged"]["shards"]
        devices = sorted({s["device"] for s in shards if s["students"]}) or ["none"]
        print(f"gpucourse grade merge: {ex}: {len(shards)} shards, {len(entries)} students, "
              f"{len(report['results'])} submissions graded on {', '.join(map(p, devices))}; isolation: "
              f"{report['isolation']['level']}", file=sys.stderr)
        if args.json:
            write_json(report, out(args.json))
        if args.csv:
            write_csv(report, out(args.csv))
        names = gradebook.names(entries)
        for page in args.leaderboard:
            write_leaderboard(report, out(page), names)
            print(f"gpucourse grade merge: leaderboard {p(out(page))}", file=sys.stderr)
        if args.feedback:
            pages = feedback.write(report, entries, args.feedback)
            print(f"gpucourse grade merge: feedback: {len(pages)} page{'s' if len(pages) != 1 else ''} in "
                  f"{p(args.feedback)}, listed in {feedback.INDEX}", file=sys.stderr)
        s = class_summary(report, entries)
        path = out(args.summary or (summary.path_beside(args.gradebook) if args.gradebook else None))
        if path:
            summary.write(s, path)
        print(summary.text(s, path), file=sys.stderr)
        if not standing["for_points"]:
            print(f"gpucourse grade merge: not for points or ranking: {standing['why']}", file=sys.stderr)
    if args.gradebook:
        ex, report, entries = merged[0]
        book = gradebook.assignment_book(workbook, [(e, en, r) for e, r, en in merged], args.points) \
            if several else None
        env_path = gradebook.write(entries, report, args.gradebook, args.points, book)
        print(f"gpucourse grade merge: gradebook {p(args.gradebook)} ({'assignment ' + workbook if several else ex}, "
              f"{len(entries)} students), environment {p(env_path)}", file=sys.stderr)
    internal = any("internal grader error" in r["flags"] for _, report, _ in merged for r in report["results"])
    return 1 if internal else 0
