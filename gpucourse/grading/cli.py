"""``gpucourse grade EXERCISE|WORKBOOK SUBMISSION [SUBMISSION ...] [--json PATH] [--csv PATH] [--gradebook PATH]
[--student NAME ...] [--replace-gradebook] [--summary PATH] [--leaderboard PATH] [--feedback DIR] [--timeout S]
[--jobs auto|N]``.

A SUBMISSION may be a folder: every .py and .ipynb file in it and its subfolders (sorted; expected.py, __pycache__
and hidden files and folders skipped), or an nbgrader course directory (``submitted/<student>/<assignment>/...``,
see gradebook.py). Progress goes to stderr as each submission finishes; the report, one line per submission in the
order given, goes to stdout at the end, and a short class summary (summary.py) to stderr after it.

Re-grading some students (``--student NAME``, or one student's folder ``submitted/<student>``) updates their rows of
an existing gradebook in place; a gradebook write never drops rows silently (gradebook.refusal says when it would,
and the batch is refused before anything is graded)."""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

from . import feedback, gradebook, grader, leaderboard, merge, profile, sandbox, shards, summary

EPILOG = """\
statuses:
  passed   every correctness check passed (score 1)
  failed   it ran but is wrong: wrong values, no required kernel launched, wrong shape/dtype/device, elements never
           written, out-of-bounds writes, nondeterministic, modified inputs (score = fraction of cases passed)
  error    could not be loaded or compiled, or raised, or (judged) changed what the judge relies on while it was
           deciding (score 0)
  timeout  over --timeout seconds, process start and imports included, or (judged) the judge's own deadline passed
           with the call still running, e.g. distributed ranks deadlocked (score 0)
  crashed  the process died: segfault, abort, os._exit, a CUDA fault (score 0)
judged exercises (a timer, a loop that must not synchronize, answers judged against fresh numbers) are judged
inside the submission's isolated worker process, and their problems are reported per case like any other exercise.
flags mark what deserves a human look (calls to the reference torch op, suspicious source, speed above the device's
physical limit, huge output, patches the worker had to undo before judging) without changing the status.
exit status: 0 when every submission received a status; 1 when the grader itself failed on a submission (that
submission is reported as "INTERNAL GRADER ERROR (not the submission's fault)", flagged "internal grader error");
2 for usage errors (unknown exercise, missing file, --isolation bubblewrap where there is no sandbox, an unknown
--student, a --gradebook write that would drop or mix rows), said before anything is graded.
isolation: each worker runs in a bubblewrap sandbox where bwrap works (own PID and network namespaces, read-only
system and course package, only its own submission and a private /tmp visible); without it, at the process level
only, which stderr and the report ("isolation" in the JSON and CSV) say. `gpucourse doctor` shows the level. At the
process level a submission can read the solved workbooks, so the batch is feedback, not grades: --gradebook and
--leaderboard are refused and the report's "standing" says why, unless --allow-process-isolation accepts it.
jobs: --jobs auto (the default) grades min(usable CPUs, 8) submissions at once, fewer where the available memory
allows less than 1 GiB per worker (each imports torch); the value chosen is said on stderr before grading.
timing (GPU): correctness cases of --jobs N run in parallel; the timed step holds its GPU alone (the report's
"timing" says so).
layouts: a folder of files (the student is the file's name, or its subfolder's), or an nbgrader course directory
(COURSE/submitted/<student>/<assignment>/<notebook>.ipynb; the assignment is --assignment, else the exercise's
workbook, else the only one). A student with no notebook or several gets no grade and a message saying why.
One student's folder of an nbgrader course (COURSE/submitted/dave) is student dave, graded as with --student dave.
gradebook (--gradebook grades.csv): one row per student (student, points, max_points, status, message, ...), the
environment once in grades.env.json beside it. Where grades.csv exists, a batch that does not grade every student
it lists is refused (exit 2, before grading) unless --student names the students re-graded: their rows are replaced
in place, every other row kept as it was (a re-grade is added to grades.env.json's "regrades"); --replace-gradebook
writes it anew with this batch's students only. Re-grade one student:
  gpucourse grade vector_add COURSE --student dave --gradebook grades.csv
summary (after a batch of several submissions, on stderr; in full beside the gradebook as grades-summary.md, or
--summary PATH): statuses counted, per case how many failed and the commonest messages (numbers replaced by N),
flags, timeouts and crashes by student, the leaderboard's top on a GPU. A --student re-grade leaves the class's
grades-summary.md as it was (--summary PATH writes the re-grade's).
assignments: name a workbook instead of an exercise (gpucourse grade 05_triton COURSE, or --assignment 05_triton
COURSE) and each of its exercises is graded in turn from each student's notebook, into one gradebook with a row per
student: <exercise>_points for each, points their sum, max_points = --points x exercises, the worst status; the other
outputs are written per exercise, named after it (r.json -> r-vector_add.json).
leaderboard (--leaderboard board.md or board.html, may be given twice): the passing submissions ranked by their
measured speed (GPU; ties within the noise shown as =N).
feedback (--feedback DIR): a page per graded submission to hand back, as nbgrader's feedback/ folder:
DIR/<student>/<assignment, else the exercise>/<exercise>.html (every case with its verdict, the checker's text and
hints, and for a failed case a picture of where its output is wrong), and DIR/index.html listing them; names made safe
for file names. Pages from earlier batches are kept. `gpucourse grade merge SHARD.json ... --feedback DIR` writes the
same pages from the shards' reports.
"""


JOBS_CAP = 8  # --jobs auto never grades more at once (beyond it, workers mostly wait for each other)
WORKER_MEMORY = 1 << 30  # bytes of memory --jobs auto counts per worker: torch alone is about 0.5 GB resident

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
    ap.add_argument("exercise", help="exercise id, e.g. vector_add (the list is below), or a workbook, e.g. "
                    "05_triton: every exercise in it, one gradebook (see assignments below)")
    ap.add_argument("submissions", nargs="*", metavar="SUBMISSION",
                    help=".py file or .ipynb notebook defining the exercise's function at top level, or a folder: "
                         "every .py and .ipynb in it and its subfolders, sorted (expected.py, __pycache__ and "
                         "hidden files skipped), or an nbgrader course directory (or its submitted/ folder)")
    ap.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    ap.add_argument("--csv", metavar="PATH", help="write one row per submission as CSV")
    ap.add_argument("--gradebook", metavar="PATH", help="write one row per student as CSV (points an LMS imports), "
                                                         "and the batch's environment in PATH's .env.json")
    ap.add_argument("--student", metavar="NAME", action="append", default=[],
                    help="grade only this student of an nbgrader course directory or folder of students (may be "
                         "given several times); with --gradebook, their rows of an existing gradebook are updated in "
                         "place and the other rows kept")
    ap.add_argument("--replace-gradebook", action="store_true",
                    help="write --gradebook anew with this batch's students only, even where the existing file "
                         "lists students the batch does not grade (their rows are dropped) or is another exercise's")
    ap.add_argument("--summary", metavar="PATH", help="write the class summary (Markdown) to PATH (default: beside "
                                                      "--gradebook, as <its stem>-summary.md)")
    ap.add_argument("--points", type=float, default=gradebook.DEFAULT_POINTS, metavar="P",
                    help=f"the gradebook's max points per student (default {gradebook.DEFAULT_POINTS:g})")
    ap.add_argument("--assignment", metavar="NAME", help="nbgrader: the assignment folder to grade (default: the "
                                                         "exercise's workbook, or the only one)")
    ap.add_argument("--leaderboard", metavar="PATH", action="append", default=[],
                    help="write a leaderboard page (.md Markdown, .html HTML); may be given twice")
    ap.add_argument("--feedback", metavar="DIR",
                    help="write a self-contained HTML page per graded submission, to hand back to its student, as "
                         "DIR/<student>/<assignment>/<exercise>.html, and DIR/index.html listing them")
    ap.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help=f"time limit per submission (default {grader.DEFAULT_TIMEOUT:g} where kernels run on a GPU, "
                         f"{grader.CPU_MODE_TIMEOUT:g} in CPU mode, where Triton's interpreter runs them)")
    ap.add_argument("--jobs", type=jobs_value, default="auto", metavar="auto|N",
                    help=f"grade N submissions at once (one GPU each where there are several; on a GPU the timed "
                         f"step still runs alone on its GPU; CUDA exercises on a GPU: up to N more are compiled "
                         f"meanwhile, ahead, by workers that see no GPU); auto (default): the usable CPUs, at most "
                         f"{JOBS_CAP}, and at most one per GiB of available memory")
    ap.add_argument("--isolation", choices=sandbox.CHOICES, default=None,
                    help="auto (default, or $GPUCOURSE_ISOLATION): a bubblewrap sandbox per worker where bwrap "
                         "works, else the process level, said on stderr and in the report; bubblewrap: refuse to "
                         "grade without the sandbox; process: no sandbox (to debug a worker)")
    ap.add_argument("--allow-process-isolation", action="store_true",
                    help="accept results graded without the sandbox for points and ranking (--gradebook, "
                         "--leaderboard); without it, a batch graded at the process level is feedback only: a "
                         "submission there can read the solved workbooks and the other submissions")
    ap.add_argument("--profile", action="store_true",
                    help="after grading, run each passing submission's timed GPU case once under Nsight Compute (ncu, "
                         "sandboxed): per kernel its time, DRAM/SM throughput, occupancy, registers, top stalls, in "
                         "--json, --feedback and on stderr; verdicts unchanged (docs/grading.md, Profile mode)")
    shards.add_argument(ap)
    return ap


def jobs_value(text: str):
    """``--jobs``: "auto" or a whole number >= 1 (argparse's type: a bad value is a usage error naming it)."""
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number of submissions graded at once, got "
                                         f"{text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or auto), got {n}")
    return n


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or taskset's share), else all of them."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of memory new processes can have: /proc/meminfo's MemAvailable (free memory plus the cache the kernel
    can drop), else ``os.sysconf``'s free pages; lowered to a cgroup v2 limit's headroom (a container's, Colab's);
    None where nothing tells."""
    found = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max":
            headroom = max(0, int(limit) - used)
            found = headroom if found is None else min(found, headroom)
    except (OSError, ValueError):
        pass
    return found


def auto_jobs(cpus: int | None = None, memory: int | None = -1) -> tuple:
    """(how many submissions ``--jobs auto`` grades at once, why): min(usable CPUs, JOBS_CAP), lowered to the
    available memory / WORKER_MEMORY where that is known. ``cpus``/``memory`` (bytes, None: unknown) are for tests."""
    cpus = usable_cpus() if cpus is None else cpus
    memory = available_memory() if memory == -1 else memory
    n = min(cpus, JOBS_CAP)
    why = f"{cpus} usable CPU{'s' if cpus != 1 else ''}" + (f", at most {JOBS_CAP}" if cpus > JOBS_CAP else "")
    if memory is not None and memory // WORKER_MEMORY < n:
        n = max(1, memory // WORKER_MEMORY)
        why += f", {memory / 2**30:.1f} GiB of memory available (1 GiB per worker)"
    return n, why


def _usage_error(msg: str) -> int:
    print(f"gpucourse grade: error: {msg}", file=sys.stderr)
    return 2


def folder_submissions(folder: str) -> list:
    """Every .py and .ipynb file under ``folder``, sorted by path: hidden files and folders (.ipynb_checkpoints),
    __pycache__ and expected.py left out (main() reads folders through gradebook.collect_folder, which gives the
    same files in the same order, grouped by student)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        found += [os.path.join(root, f) for f in files
                  if f.endswith((".py", ".ipynb")) and not f.startswith(".") and f not in SKIPPED]
    return sorted(found, key=lambda p: os.path.relpath(p, folder).split(os.sep))


def workbooks() -> dict:
    """Workbook name (``05_triton``) -> its exercise ids, in the order the solved workbook checks them."""
    from .exercise import all_ids

    found: dict = {}
    for ex in all_ids():
        found.setdefault(gradebook.workbook_of(ex), []).append(ex)
    found.pop("", None)
    return {wb: _workbook_order(wb, ids) for wb, ids in sorted(found.items())}


def _workbook_order(workbook: str, ids: list) -> list:
    """``ids`` in the order of their first ``check("<id>"`` in the solved workbook (by name where it is not found)."""
    import re

    from ..solutions import solution_path
    from ..workbooks import code_cells

    try:
        text = "\n".join(code_cells(solution_path(workbook)))
    except Exception:  # an installed package without solutions/: by name
        text = ""
    found = {ex: m.start() for ex in ids if (m := re.search(r"check\(\s*[\"']" + re.escape(ex) + r"[\"']", text))}
    return sorted(ids, key=lambda ex: (found.get(ex, len(text) + 1), ex))


def _target(args):
    """(exercise ids, submissions, workbook or None) from the command line, or an exit status (usage error said):
    ``EXERCISE SUBMISSION...``; ``WORKBOOK SUBMISSION...`` (every exercise of the workbook); or ``--assignment
    WORKBOOK SUBMISSION...`` (the assignment folder is named after its workbook)."""
    from .exercise import all_ids

    ids, books = all_ids(), workbooks()
    if args.exercise in ids:
        if not args.submissions:
            return _usage_error("no SUBMISSION given: name a file, a folder or an nbgrader course directory")
        return [args.exercise], list(args.submissions), None
    if args.exercise in books:
        if not args.submissions:
            return _usage_error(f"no SUBMISSION given for assignment {args.exercise}: name a folder or an nbgrader "
                                f"course directory")
        return books[args.exercise], list(args.submissions), args.exercise
    if args.assignment in books and os.path.exists(args.exercise):
        return books[args.assignment], [args.exercise, *args.submissions], args.assignment
    return _usage_error(f"unknown exercise {args.exercise!r}; known exercises: {', '.join(ids)}; or a workbook, "
                        f"graded whole: {', '.join(books)}")


def _derived(path: str | None, exercise: str, several: bool) -> str | None:
    """An output's path for one exercise of an assignment: ``grades.json`` -> ``grades-vector_add.json``."""
    if not path or not several:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}-{exercise}{ext}"


def _collect(args, ex, submissions: list, say: bool = True):
    """(entries, students implied by a student's folder, nbgrader seen) for one exercise, or an exit status."""
    entries, nbgrader_seen, implied = [], False, []
    for path in submissions:
        if not os.path.exists(path):
            return _usage_error(f"no such submission: {gradebook.printable(path)}")
        try:
            one = os.path.isdir(path) and not gradebook.nbgrader_root(path) and gradebook.student_folder(path)
            if one:  # COURSE/submitted/<student>[/<assignment>]: that student of the course, not a folder of files
                root, student, assignment = one
                if assignment and args.assignment and assignment != args.assignment:
                    return _usage_error(f"{gradebook.printable(path)} is assignment {gradebook.printable(assignment)}"
                                        f" and --assignment says {gradebook.printable(args.assignment)}")
                nbgrader_seen = True
                found = gradebook.select(gradebook.collect_nbgrader(root, ex.id, args.assignment or assignment),
                                         [student])
                implied.append(student)
                if say:
                    print(f"gpucourse grade: note: {gradebook.printable(path)} is student "
                          f"{gradebook.printable(student)} of the nbgrader course "
                          f"{gradebook.printable(os.path.dirname(root))}: graded as --student "
                          f"{gradebook.printable(student)}", file=sys.stderr)
            elif os.path.isdir(path) and gradebook.nbgrader_root(path):
                nbgrader_seen = True
                found = gradebook.collect_nbgrader(gradebook.nbgrader_root(path), ex.id, args.assignment)
            elif os.path.isdir(path):
                found = gradebook.collect_folder(path)
            elif not path.endswith((".py", ".ipynb")):
                return _usage_error(f"{gradebook.printable(path)}: a submission must be a .py file or an .ipynb "
                                    f"notebook")
            else:
                found = gradebook.collect_files([path])
        except gradebook.LayoutError as exc:
            return _usage_error(str(exc))
        entries += found
    return entries, implied, nbgrader_seen


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["merge"]:  # `gpucourse grade merge SHARD.json ...` joins --shard reports (merge.py)
        return merge.main(argv[1:])
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:  # argparse: --help exits 0, usage errors 2
        return int(exc.code or 0)
    from .. import device
    from .exercise import get

    target = _target(args)
    if isinstance(target, int):
        return target
    ids, submissions, workbook = target
    exercises = [get(i) for i in ids]
    for ex in exercises:
        if ex.gpu_only and not device.on_gpu():
            hint = (f" (its CUDA kernels cannot run here; in a notebook, gpucourse.check({ex.id!r}, fn) compile-checks "
                    f"them with nvcc)") if ex.kind == "cuda" else ""
            return _usage_error(f"exercise {ex.id!r} needs a CUDA GPU; this machine runs in CPU mode{hint}")
    if args.assignment and workbook and args.exercise != workbook:
        args.assignment = None  # ``--assignment 05_triton COURSE``: the folder is the workbook's name, found as usual
    several = workbook is not None
    batches = []  # [(exercise, entries, paths)]
    for k, ex in enumerate(exercises):
        got = _collect(args, ex, submissions, say=k == 0)
        if isinstance(got, int):
            return got
        entries, implied, nbgrader_seen = got
        if args.assignment and not nbgrader_seen:
            return _usage_error("--assignment names an nbgrader assignment folder, and no SUBMISSION is an nbgrader "
                                "course directory (one with submitted/<student>/<assignment>/)")
        if args.student:
            try:
                entries = gradebook.select(entries, args.student)
            except gradebook.LayoutError as exc:
                return _usage_error(str(exc))
        if args.shard:
            entries = args.shard.pick(entries, say=k == 0)
        if k == 0:  # the same students and files for every exercise of an assignment: said once
            for e in entries:
                for note in e.notes + ([f"{gradebook.printable(e.student)}: {e.problem}"] if e.path is None else []):
                    print(f"gpucourse grade: note: {note}", file=sys.stderr)
        partial = bool(args.student or implied)
        batches.append((ex, entries, gradebook.to_grade(entries)))
    if args.shard and (not args.json or not batches[0][2]):  # --json needed; an empty shard still writes it
        return shards.without_grading(args, batches, workbook, ids)
    if not batches[0][2]:
        return _usage_error("nothing to grade: no student has a .py or .ipynb submission (see the notes above)")
    if (args.timeout is not None and args.timeout <= 0) or args.points <= 0:
        return _usage_error("--timeout and --points must be > 0")
    for page in args.leaderboard:  # said before grading, not after a class's batch has run
        if not page.lower().endswith((".md", ".markdown", ".html", ".htm")):
            return _usage_error(f"--leaderboard {gradebook.printable(page)}: name it .md (Markdown) or .html")
    for out in [args.json, args.csv, args.gradebook, args.summary, *args.leaderboard]:
        if out and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            return _usage_error(f"{gradebook.printable(out)}: its folder does not exist")
    if args.feedback and os.path.exists(args.feedback) and not os.path.isdir(args.feedback):
        return _usage_error(f"--feedback {gradebook.printable(args.feedback)} is a file: name a folder")
    if args.replace_gradebook and not args.gradebook:
        return _usage_error("--replace-gradebook: there is no --gradebook to replace")
    existing = None  # said before grading, not after a class's batch has run
    key, points_total = (workbook, args.points * len(ids)) if several else (ids[0], args.points)
    columns = gradebook.assignment_columns(ids) if several else gradebook.COLUMNS
    if args.gradebook and os.path.isdir(args.gradebook):
        return _usage_error(f"--gradebook {gradebook.printable(args.gradebook)} is a folder: name the CSV file")
    if args.gradebook and os.path.exists(args.gradebook) and not args.replace_gradebook:
        try:
            existing = gradebook.read_existing(args.gradebook, columns)
        except gradebook.LayoutError as exc:
            return _usage_error(str(exc))
        refused = gradebook.refusal(existing, batches[0][1], key, points_total, partial)
        if refused:
            return _usage_error(refused)
    try:
        isolation = sandbox.detect(args.isolation)
    except (ValueError, RuntimeError) as exc:
        return _usage_error(str(exc))
    grading_for_points = grader.standing(isolation, args.allow_process_isolation)
    if not grading_for_points["for_points"] and (args.gradebook or args.leaderboard):
        return _usage_error(f"no --gradebook or --leaderboard: {grading_for_points['why']}")
    if args.jobs == "auto":
        jobs, why = auto_jobs()
        how = f"--jobs auto: {why}"
    else:
        jobs, how = args.jobs, f"--jobs {args.jobs}"
    if several:
        print(f"gpucourse grade: assignment {workbook}: {len(ids)} exercises ({', '.join(ids)}), one after the "
              f"other", file=sys.stderr, flush=True)
    graded, internal = [], False
    for ex, entries, paths in batches:
        print(f"gpucourse grade: {ex.id}: {len(paths)} submission{'s' if len(paths) != 1 else ''}, {jobs} at a "
              f"time ({how})", file=sys.stderr, flush=True)
        if not grading_for_points["for_points"]:
            print(f"gpucourse grade: not for points: {grading_for_points['why']}", file=sys.stderr, flush=True)
        report = grader.grade(ex, paths, timeout=args.timeout, jobs=jobs, progress=True, isolation=isolation,
                              allow_process_isolation=args.allow_process_isolation)
        shards.annotate(report, args.shard, entries, workbook, ids)  # no-op without --shard
        if args.profile:  # before the outputs: the JSON and the feedback pages carry the profiles
            profile.profile_batch(ex, report, isolation, args.timeout)
        internal |= _outputs(args, ex, entries, paths, report, several, partial and existing is not None)
        graded.append((ex.id, entries, report))
    if args.gradebook:
        _write_gradebook(args, graded, existing, partial, workbook)
    return 1 if internal else 0


def _outputs(args, ex, entries: list, paths: list, report: dict, several: bool, regrade: bool) -> bool:
    """One exercise's batch written out (JSON, CSV, leaderboards, feedback; an assignment's under names derived
    from the ones given) and reported on stdout, with its summary; True when the grader failed on a submission."""
    out = lambda path: _derived(path, ex.id, several)  # noqa: E731
    if args.json:
        grader.write_json(report, out(args.json))
    if args.csv:
        grader.write_csv(report, out(args.csv))
    for page in args.leaderboard:
        leaderboard.write(report, out(page), gradebook.names(entries))
        print(f"gpucourse grade: leaderboard {out(page)}", file=sys.stderr)
    if args.feedback:
        pages = feedback.write(report, entries, args.feedback)
        print(f"gpucourse grade: feedback: {len(pages)} page{'s' if len(pages) != 1 else ''} in "
              f"{gradebook.printable(args.feedback)}, listed in {feedback.INDEX}", file=sys.stderr)
    p = gradebook.printable  # a path or a message may hold control characters: shown, never sent to the terminal
    if several:
        print(f"== {ex.id}")
    width = max(len(p(r["submission"])) for r in report["results"])
    for r in report["results"]:
        flags = f"  [flags: {p('; '.join(r['flags']))}]" if r["flags"] else ""
        print(f"{p(r['submission']):<{width}}  {r['status']:<8} {r['score']:.2f}  {p(r['message'])}{flags}")
    print(f"({report['environment']['fingerprint']}; isolation: {report['isolation']['level']})")
    if not report["standing"]["for_points"]:
        print(f"not for points or ranking: {report['standing']['why']}")
    _summarize(args, report, entries, regrade, len(paths), ex.id, several)
    return any("internal grader error" in r["flags"] for r in report["results"])


def _write_gradebook(args, graded: list, existing, partial: bool, workbook: str | None) -> None:
    """The gradebook: one exercise's rows, or (an assignment) one row per student with every exercise's points."""
    ex_id, entries, report = graded[0]
    book = gradebook.assignment_book(workbook, graded, args.points) if workbook else None
    if partial and existing is not None:
        env_path, replaced, added = gradebook.update(existing, entries, report, args.points, book)
        kept = len(gradebook.existing_students(existing)) - len(replaced)
        said = ", ".join(f"{label} {', '.join(map(gradebook.printable, who))}"
                         for label, who in (("updated", replaced), ("added", added)) if who)
        print(f"gpucourse grade: gradebook {gradebook.printable(args.gradebook)}: {said}; {kept} other row"
              f"{'s' if kept != 1 else ''} kept as they were; environment {env_path} (this re-grade in its "
              f"\"regrades\")", file=sys.stderr)
    else:
        env_path = gradebook.write(entries, report, args.gradebook, args.points, book)
        what = f"assignment {workbook}, {len(graded)} exercises" if workbook else ex_id
        print(f"gpucourse grade: gradebook {args.gradebook} ({what}, {len(entries)} students), environment "
              f"{env_path}", file=sys.stderr)


def _summarize(args, report: dict, entries: list, regrade: bool, graded: int, exercise: str = "",
               several: bool = False) -> None:
    """The class summary: written to --summary, or beside --gradebook (not for a --student re-grade of an existing
    gradebook: the file there summarises the class, and one student's batch would replace it), and printed short on
    stderr after the report for a batch of several submissions, or wherever a file is written."""
    s = summary.summarize(report, gradebook.names(entries),
                          [(e.student, e.status or "missing", e.problem) for e in entries if e.path is None])
    path = _derived(args.summary or (summary.path_beside(args.gradebook) if args.gradebook and not regrade else None),
                    exercise, several)
    if path:
        summary.write(s, path)
    if graded > 1 or path:
        sys.stdout.flush()
        print(summary.text(s, path), file=sys.stderr)
    if args.gradebook and regrade and not args.summary:
        print(f"gpucourse grade: note: the class summary {gradebook.printable(summary.path_beside(args.gradebook))} "
              f"was left as it was (--summary PATH writes this re-grade's)", file=sys.stderr)
