"""``gpucourse grade ... --shard K/N``: grade one of N deterministic parts of a class, so N machines (a Slurm job
array, docs/grading.md) grade a class together and ``gpucourse grade merge`` (merge.py) joins their JSON reports.

A student is in shard ``int(sha256(name)) % N``: the same shard on every machine and in every run, whatever else is
in the class, so adding a student moves nobody else. A student's submissions (an ambiguous student's several files)
and, for an assignment, all of the student's exercises stay in one shard.

Each shard's ``--json`` report records what the merge needs beyond the results: ``"shard": {"k", "n", "students",
"class_students", "device"}``, the shard's students as the gradebook reads them (``"entries"``, each with its place in
the class's order, so the merged gradebook lists them as a one-machine run does) and, for an assignment, its
workbook and exercises. A shard that gets no student still writes its report, with no results, so the merge sees all
N of them.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys

from . import batch, gradebook, sandbox
from .report import write_json


@dataclasses.dataclass
class Shard:
    """The part of the class this run grades: students whose :func:`shard_of` is ``k`` of ``n``; ``students`` and
    ``of``: how many of the class's students it got, once :meth:`pick` has run."""
    k: int
    n: int
    students: int = 0
    of: int = 0

    def pick(self, entries: list, say: bool = True) -> list:
        """The entries of this shard's students, in the class's order, each remembering its place in that order
        (``index``, for the merge). ``say``: tell stderr how many students this shard grades of how many."""
        for i, e in enumerate(entries):
            e.index = i
        mine = [e for e in entries if shard_of(e.student, self.n) == self.k]
        self.students, self.of = len({e.student for e in mine}), len({e.student for e in entries})
        if say:
            print(f"gpucourse grade: shard {self.k}/{self.n}: grades {self.students} of the class's {self.of} "
                  f"student{'s' if self.of != 1 else ''} (the others are in the other shards)", file=sys.stderr,
                  flush=True)
        return mine


def shard_of(student: str, n: int) -> int:
    """The shard (0 .. n-1) of a student: sha256 of the name, so every machine agrees and nothing else moves it."""
    digest = hashlib.sha256(str(student).encode("utf-8", errors="surrogateescape")).hexdigest()
    return int(digest, 16) % n


def parse(text: str) -> Shard:
    """``--shard K/N`` (argparse's type: a bad value is a usage error, exit 2, naming it)."""
    k, sep, n = str(text).strip().partition("/")
    try:
        k, n = int(k), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N, two whole numbers with 0 <= K < N (e.g. 0/3 is the first "
                                         f"of 3 shards), got {text!r}") from None
    if not sep:
        raise argparse.ArgumentTypeError(f"expected K/N, got {text!r}")
    if n < 1:
        raise argparse.ArgumentTypeError(f"N (the number of shards) must be at least 1, got {text!r}")
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"K must be between 0 and N-1 = {n - 1} (shards are numbered from 0, as "
                                         f"$SLURM_ARRAY_TASK_ID is), got {text!r}")
    return Shard(k, n)


def add_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--shard", type=parse, default=None, metavar="K/N",
                    help="grade only shard K (0 <= K < N) of N: the students whose int(sha256(name)) %% N is K (all "
                         "of a student's files and exercises stay in one shard); needs --json; `gpucourse grade "
                         "merge SHARD.json ...` joins the N shards' reports into one gradebook, summary and "
                         "leaderboard (docs/grading.md, Grading across machines)")


def annotate(report: dict, shard: Shard | None, entries: list, workbook: str | None = None,
             exercises: list = ()) -> dict:
    """``report`` (one exercise's, as grader.grade returns it) with what the merge needs: the shard, its students
    (the gradebook's entries, with their place in the class) and the assignment it is part of. No-op without
    ``--shard``."""
    if shard is None:
        return report
    env = report.get("environment") or {}
    report["shard"] = {"k": shard.k, "n": shard.n, "students": shard.students, "class_students": shard.of,
                       "device": env.get("gpu") or "CPU"}
    report["entries"] = [dict(dataclasses.asdict(e), index=getattr(e, "index", i)) for i, e in enumerate(entries)]
    if workbook:
        report["assignment"], report["exercises"] = workbook, list(exercises)
    return report


def without_grading(args, batches: list, workbook: str | None, ids: list) -> int:
    """The exit status of a shard that grades nothing: ``--shard`` without ``--json`` is a usage error (the merge
    reads the shards' JSON); a shard with nothing to grade (no student, or only students without a file) writes its
    report, no results, to --json (per exercise for an assignment, as any batch does) so the merge sees every shard."""
    from .cli import _derived, _usage_error

    if not args.json:
        return _usage_error(f"--shard {args.shard.k}/{args.shard.n} needs --json PATH: `gpucourse grade merge` "
                            f"joins the shards' JSON reports into the class's gradebook")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        return _usage_error(f"{gradebook.printable(args.json)}: its folder does not exist")
    try:
        isolation = sandbox.detect(args.isolation)
    except (ValueError, RuntimeError) as exc:
        return _usage_error(str(exc))
    for ex, entries, _ in batches:
        report = {"exercise": ex.id, "environment": batch.environment(), "isolation": isolation.to_dict(),
                  "standing": batch.standing(isolation, args.allow_process_isolation), "results": []}
        annotate(report, args.shard, entries, workbook, ids)
        path = _derived(args.json, ex.id, workbook is not None)
        write_json(report, path)
        print(f"gpucourse grade: shard {args.shard.k}/{args.shard.n}: nothing to grade here; its report "
              f"{gradebook.printable(path)} says so, for the merge", file=sys.stderr)
    return 0
