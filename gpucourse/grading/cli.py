"""``gpucourse grade EXERCISE SUBMISSION [SUBMISSION ...] [--json PATH] [--csv PATH] [--timeout S] [--jobs N]``.

A SUBMISSION may be a folder: every .py and .ipynb file in it and its subfolders (sorted; expected.py, __pycache__
and hidden files and folders skipped). A line per submission goes to stderr as each finishes; the report, one line
per submission in the order given, goes to stdout at the end."""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

from . import grader, sandbox

EPILOG = """\
statuses:
  passed   every correctness check passed (score 1)
  failed   it ran but is wrong: wrong values, no required kernel launched, wrong shape/dtype/device, elements never
           written, out-of-bounds writes, nondeterministic, modified inputs (score = fraction of cases passed)
  error    could not be loaded or compiled, or raised, or (judged) changed what the judge relies on while it was
           deciding (score 0)
  timeout  over --timeout seconds, process start and imports included (score 0)
  crashed  the process died: segfault, abort, os._exit, a CUDA fault (score 0)
judged exercises (a timer, a loop that must not synchronize, answers judged against fresh numbers) are judged
inside the submission's isolated worker process, and their problems are reported per case like any other exercise.
flags mark what deserves a human look (calls to the reference torch op, suspicious source, speed above the device's
physical limit, huge output, patches the worker had to undo before judging) without changing the status.
exit status: 0 when every submission received a status; 1 when the grader itself failed on a submission (that
submission is reported as "INTERNAL GRADER ERROR (not the submission's fault)", flagged "internal grader error");
2 for usage errors (unknown exercise, missing file, --isolation bubblewrap where there is no sandbox).
isolation: each worker runs in a bubblewrap sandbox where bwrap works (own PID and network namespaces, read-only
system and course package, only its own submission and a private /tmp visible); without it, at the process level
only, which stderr and the report ("isolation" in the JSON and CSV) say. `gpucourse doctor` shows the level.
timing (GPU): correctness cases of --jobs N run in parallel; the timed step holds its GPU alone (the report's
"timing" says so).
"""


SKIPPED = ("expected.py",)  # file names a folder's expansion leaves out (the known submissions' expectations)


def _exercises_epilog() -> str:
    from .exercise import all_ids

    return "exercises:\n" + textwrap.fill(", ".join(all_ids()), width=116, initial_indent="  ",
                                          subsequent_indent="  ") + "\n\n"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpucourse grade", description="Grade submissions for one exercise, each in "
                                 "its own isolated process.\nA line per submission goes to stderr as each finishes; "
                                 "the report goes to stdout at the end.", epilog=_exercises_epilog() + EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exercise", help="exercise id, e.g. vector_add (the list is below)")
    ap.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                    help=".py file or .ipynb notebook defining the exercise's function at top level, or a folder: "
                         "every .py and .ipynb in it and its subfolders, sorted (expected.py, __pycache__ and "
                         "hidden files skipped)")
    ap.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    ap.add_argument("--csv", metavar="PATH", help="write one row per submission as CSV")
    ap.add_argument("--timeout", type=float, default=grader.DEFAULT_TIMEOUT, metavar="SECONDS",
                    help=f"time limit per submission (default {grader.DEFAULT_TIMEOUT:g})")
    ap.add_argument("--jobs", type=int, default=1, metavar="N",
                    help="grade N submissions at once (one GPU each where there are several; on a GPU the timed "
                         "step still runs alone on its GPU)")
    ap.add_argument("--isolation", choices=sandbox.CHOICES, default=None,
                    help="auto (default, or $GPUCOURSE_ISOLATION): a bubblewrap sandbox per worker where bwrap "
                         "works, else the process level, said on stderr and in the report; bubblewrap: refuse to "
                         "grade without the sandbox; process: no sandbox (to debug a worker)")
    return ap


def _usage_error(msg: str) -> int:
    print(f"gpucourse grade: error: {msg}", file=sys.stderr)
    return 2


def folder_submissions(folder: str) -> list:
    """Every .py and .ipynb file under ``folder``, sorted by path: hidden files and folders (.ipynb_checkpoints),
    __pycache__ and expected.py left out."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        found += [os.path.join(root, f) for f in files
                  if f.endswith((".py", ".ipynb")) and not f.startswith(".") and f not in SKIPPED]
    return sorted(found, key=lambda p: os.path.relpath(p, folder).split(os.sep))


def main(argv=None) -> int:
    ap = _parser()
    try:
        args = ap.parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:  # argparse: --help exits 0, usage errors 2
        return int(exc.code or 0)
    from .. import device
    from .exercise import all_ids, get

    try:
        ex = get(args.exercise)
    except KeyError:
        return _usage_error(f"unknown exercise {args.exercise!r}; known exercises: {', '.join(all_ids())}")
    if ex.gpu_only and not device.on_gpu():
        hint = (f" (its CUDA kernels cannot run here; in a notebook, gpucourse.check({ex.id!r}, fn) compile-checks "
                f"them with nvcc)") if ex.kind == "cuda" else ""
        return _usage_error(f"exercise {ex.id!r} needs a CUDA GPU; this machine runs in CPU mode{hint}")
    paths = []
    for path in args.submissions:
        if not os.path.exists(path):
            return _usage_error(f"no such submission: {path}")
        if os.path.isdir(path):
            found = folder_submissions(path)
            if not found:
                return _usage_error(f"{path}: a folder with no .py or .ipynb submissions in it")
            paths += found
            continue
        if not path.endswith((".py", ".ipynb")):
            return _usage_error(f"{path}: a submission must be a .py file or an .ipynb notebook")
        paths.append(path)
    if args.timeout <= 0 or args.jobs < 1:
        return _usage_error("--timeout must be > 0 and --jobs >= 1")
    try:
        isolation = sandbox.detect(args.isolation)
    except (ValueError, RuntimeError) as exc:
        return _usage_error(str(exc))
    report = grader.grade(ex, paths, timeout=args.timeout, jobs=args.jobs, progress=True, isolation=isolation)
    if args.json:
        grader.write_json(report, args.json)
    if args.csv:
        grader.write_csv(report, args.csv)
    width = max(len(r["submission"]) for r in report["results"])
    for r in report["results"]:
        flags = f"  [flags: {'; '.join(r['flags'])}]" if r["flags"] else ""
        print(f"{r['submission']:<{width}}  {r['status']:<8} {r['score']:.2f}  {r['message']}{flags}")
    print(f"({report['environment']['fingerprint']}; isolation: {report['isolation']['level']})")
    internal = any("internal grader error" in r["flags"] for r in report["results"])
    return 1 if internal else 0
