"""A submission's result (:class:`Result`), the verdicts for a worker that did not reach one of its own (timed out,
closed the channel, forged a message, used the course's code), and the batch's report written as JSON or CSV."""
from __future__ import annotations

import csv
import dataclasses
import json

from . import checker, compare, process

# A failed case's where map in the report (:func:`where_field`), which a feedback page draws (feedback.py): the
# checker's compare.WhereMap, whose codes may hold compare.MAX_SIDE**2 (1 Mi) cells, pooled further to at most
# WHERE_SIDE cells per side of a 2-D map, or WHERE_SIDE**2 cells of a 1-D one, and its first WHERE_PAST offsets
# written past the end. write_json's indent puts each code on a line of its own, 19 bytes at its depth, so a failed
# case's map takes at most about 1,024 x 19 B + WHERE_PAST x 21 B + the rest, 21 KB (tests/test_feedback.py measures
# the worst case): a class of 300 students failing 6 cases each adds under 40 MB to the report.
WHERE_SIDE = 32
WHERE_PAST = 32


@dataclasses.dataclass
class Result:
    """One submission's result, as the report's JSON and CSV carry it (:meth:`to_dict`). ``status``: passed, failed,
    error, timeout or crashed (docs/grading.md); ``score``: the fraction of cases passed (0 unless passed/failed)."""
    submission: str  # the path given
    status: str
    score: float
    message: str
    # [{"name", "passed", "detail"}], one per step; a failed case with a where map also has "where" (where_field)
    checks: list[dict] = dataclasses.field(default_factory=list)
    flags: list[str] = dataclasses.field(default_factory=list)  # for a human to look at; never the verdict
    seconds: float = 0.0
    timing: str = ""  # how its speed was timed: "alone on GPU 0", "not timed (CPU mode)"...
    perf: dict | None = None  # the timed step's numbers (GPU, passed, a speed target): see session._perf_fields

    def to_dict(self) -> dict:
        d = {"submission": self.submission, "status": self.status, "score": float(self.score),
             "message": self.message, "checks": self.checks, "flags": self.flags, "seconds": self.seconds,
             "timing": self.timing}
        if self.perf is not None:  # only where a speed was measured: the leaderboard reads it
            d["perf"] = self.perf
        return d


def where_field(where: compare.WhereMap) -> dict:
    """The report's form of a failed case's where map (``check["where"]``), plain JSON values: ``shape`` of the
    output, ``slice`` (the leading indices of the 2-D slice drawn, for a 3-D or larger output), ``block`` (elements
    per cell along each dimension of ``codes``), the exact counts ``n_right``, ``n_wrong``, ``n_never`` and
    ``n_past`` (elements written past the end), ``codes``: rows of compare's codes (a 1-D output: one row), pooled to
    at most WHERE_SIDE per side (a cell holds the largest code among its elements, as compare.pool does), and
    ``past_end``: the first WHERE_PAST offsets written past the end."""
    codes = where.codes
    if codes.dim() == 1:
        more = (compare.block_for(codes.numel(), WHERE_SIDE * WHERE_SIDE),)
    else:
        more = (compare.block_for(codes.shape[0], WHERE_SIDE), compare.block_for(codes.shape[1], WHERE_SIDE))
    pooled = compare.pool(codes, more)
    past = [] if where.past_end is None else [int(i) for i in where.past_end[:WHERE_PAST].tolist()]
    return {"shape": [int(s) for s in where.shape], "slice": [int(i) for i in where.slice],
            "block": [int(b) * m for b, m in zip(where.block, more)], "n_right": int(where.n_right),
            "n_wrong": int(where.n_wrong), "n_never": int(where.n_never), "n_past": where.n_past,
            "codes": [pooled.tolist()] if pooled.dim() == 1 else pooled.tolist(), "past_end": past}


def first_failure(checks: list, limit: int = 300) -> str:
    """\"case 'n=1023' failed: <its first problem line>\" for the first failed check, or "" when none failed: the
    reason a crashed or timed-out submission's message gives, found before the process died."""
    first = next((c for c in checks if not c["passed"]), None)
    if first is None:
        return ""
    what = checker.first_problem(first["detail"]).strip()
    if len(what) > limit:
        what = what[:limit - 3].rstrip() + "..."
    return f"case {first['name']!r} failed" + (f": {what}" if what else "")


def course_code(result: Result, ex, found: list) -> None:
    """The verdict of a submission that ran the course's own code: an error, as the course's trapped solutions are
    (``is the course's own solution``); what it said otherwise stays in its checks."""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    result.status, result.score = "error", 0.0
    result.message = (f"{ex.function} used the course's own code: it imports the course's lessons (the instructor's "
                      f"kernels and helpers) at {found[0]}{more}; an answer computed by them is not yours: write "
                      f"your own")


def timed_out(result: Result, timeout: float, doing: list, frames: list, on_gpu: bool) -> None:
    """The verdict of a worker over the time limit: where it was (``doing``: the last step the grader asked for;
    ``frames``: the submission's innermost frames, process.where_it_hung) and what had failed before."""
    result.status, result.score = "timeout", 0.0
    kind, what = doing[-1]
    during = {"load": "while loading the submission (its top-level code)",
              "case": f"while running case {what!r}"}.get(kind, f"during {what}")
    at = f", at {frames[0]}" if frames else ""
    result.message = f"over the time limit of {timeout:g} s {during}{at} (a hang, an endless loop, or a slow " \
                     f"import?" + (")" if on_gpu else "; in CPU mode Triton's interpreter runs every program in " \
                                                      "Python, so a kernel of very small blocks is slow too)")
    reason = first_failure(result.checks)
    if reason:
        result.message += f"; before that, {reason}"
    result.checks.append({"name": what if kind == "case" else kind, "passed": False, "detail": (
        f"over the time limit of {timeout:g} s {during}; " + (
            "where it was at the limit (innermost first):\n" + "\n".join(f"  {f}" for f in frames) if frames
            else "where it was at the limit is unknown (no line of the submission was running, or its stack "
                 "could not be had)"))})


def closed(result: Result, isolation, replied: list, code: int | None, err_cap, ended: dict) -> None:
    """The verdict of a worker that closed the channel before grading finished: crashed, with how it ended and what
    had failed before; or, where it never started (process.start_failure), an internal grader error."""
    result.status, result.score = "crashed", 0.0
    reason = first_failure(result.checks)  # what was found wrong before the crash, the likelier cause
    start = process.start_failure(isolation, replied, code, err_cap, ended)
    if start:
        result.status = "error"
        result.message = f"INTERNAL GRADER ERROR (not the submission's fault): {start}"
        result.flags.append("internal grader error")
    else:
        result.message = process.how_it_ended(code, ended, isolation.sandboxed)
        if reason:
            result.message += (" after " if result.message.startswith("the process died") else
                               "; before that, ") + reason


def tampered(result: Result, exc: Exception) -> None:
    """The verdict of a worker that sent a message the worker never sends: only the submission's code can."""
    result.status, result.score = "error", 0.0
    result.message = (f"tampering with the grader's channel: the worker sent a message it never sends ({exc}); "
                      f"only the submission's code can write one")
    result.flags.append("tampered with the grader's channel")


def output_notes(result: Result, out_cap, err_cap) -> None:
    """What the worker printed, into the result: a flag for output past what is kept, and the end of its stderr
    in the last check of a submission that did not run to a verdict (crashed, error, timeout)."""
    total = out_cap.total + err_cap.total
    if total > process.OUTPUT_KEEP:
        result.flags.append(f"printed {total / 1e6:.1f} MB of output (kept the first and last "
                            f"{process.OUTPUT_KEEP // 2048} KiB of each stream)")
    if result.status in ("crashed", "error", "timeout"):
        tail = err_cap.text()[-2000:].strip()
        if tail:
            for check in result.checks[-1:]:
                check["detail"] = (check["detail"] + "\nstderr (end):\n" + tail).strip()
            if not result.checks:
                result.checks.append({"name": "load", "passed": False, "detail": "stderr (end):\n" + tail})


def write_json(report: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


CSV_COLUMNS = ["submission", "status", "score", "message", "seconds", "flags", "timing", "isolation", "gpu", "driver",
               "torch", "triton", "mode", "fingerprint"]


def write_csv(report: dict, path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in report["results"]:
            env = r.get("environment") or report["environment"]  # a merged report's shards (merge.py) may differ
            w.writerow({"submission": r["submission"], "status": r["status"], "score": f"{r['score']:.4f}",
                        "message": r["message"], "seconds": r["seconds"], "flags": "; ".join(r["flags"]),
                        "timing": r["timing"], "isolation": report["isolation"]["level"],
                        "gpu": env.get("gpu") or "CPU", "driver": env.get("driver") or "",
                        "torch": env.get("torch"), "triton": env.get("triton") or "", "mode": env.get("mode"),
                        "fingerprint": env.get("fingerprint")})
