"""Lesson 09's second exercise: read a profiler trace as data and name where the time goes.

Judged (``JudgedExercise``): the judge generates a training-step trace from a seed the submission never sees
(``readtrace.generate``: which kernel kind is the bottleneck, the source lines, the loader's stalls, the sync call),
computes the three answers itself before the call, hands the learner a deep copy of the events and compares what
comes back: the top kernel by total GPU time (its exact name), the GPU's idle share (within 0.01), the line that
synchronizes (``file.py:N``). The course's own reader (``readtrace``) is trapped during the call.
"""
from __future__ import annotations

import copy

from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

from .. import readtrace  # at module level: loaded before a graded submission is (see JudgedExercise)

STATEMENT = """\
Write `read_the_profile(trace)` that returns a dict with three answers about a profiled training loop:
  "top_kernel": the name of the GPU kernel with the largest total time (the sum of its events' `dur`), exactly as
                in the trace;
  "idle_share": the share of the GPU's window (from the first GPU event's start to the last GPU event's end) in
                which nothing ran on the GPU, a float in [0, 1] (within 0.01); GPU events are those whose `cat` is
                "kernel", "gpu_memcpy" or "gpu_memset", on any stream (`tid`): where two overlap, that time is busy
                once;
  "sync_line":  the source line ("train.py:57", from the event's args["line"]) of the host call that waits for
                the GPU: a "cuda_runtime" event named cudaStreamSynchronize, cudaDeviceSynchronize or
                cudaEventSynchronize (where several lines make such calls: the line whose calls waited longest,
                their durations summed).
`trace` is a list of events as in a Chrome trace's "traceEvents" (what torch.profiler's export_chrome_trace
writes): dicts with "name", "cat" ("cpu_op", "cuda_runtime", "kernel", "gpu_memcpy"...), "ts" and "dur" in
microseconds, "pid", "tid" and "args" (host events carry args["line"], the line that issued them). Each check
draws a new trace from a seed you never see: a different kernel is the bottleneck, other lines, other stalls.
Use plain Python; the course's own trace reader is off limits.
"""

IDLE_TOL = 0.01


def _line(value) -> str | None:
    """"train.py:57", "train.py(57)", " train.py:57 " -> "train.py:57"."""
    if not isinstance(value, str):
        return None
    v = value.strip().replace("(", ":").rstrip(")")
    return v or None


def _summed_idle(events) -> float:
    """The idle share with busy time as the plain sum of GPU durations (overlaps counted twice)."""
    gpu = readtrace.gpu_events(events)
    window = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    return 1.0 - sum(e["dur"] for e in gpu) / window


def judge(fn, params: dict, seed: int) -> list:
    """Generate the trace from ``seed``, answer it, call ``fn`` on a copy, compare the three answers."""
    gen = readtrace.generate(seed, iters=params["iters"], loader_us=tuple(params["loader_us"]),
                             prefetch=params.get("prefetch", True),
                             copy_us=tuple(params.get("copy_us", (30.0, 80.0))))
    events, truth = gen["events"], gen["answers"]
    mine = copy.deepcopy(events)
    with trapped(readtrace.answers, readtrace.kernel_table, readtrace.gpu_idle_share, readtrace.sync_lines,
                 readtrace.merge, readtrace.gpu_events):
        got = fn(mine)
    if not isinstance(got, dict):
        return [f"returned {type(got).__name__}, expected a dict with keys top_kernel, idle_share, sync_line"]
    missing = [k for k in ("top_kernel", "idle_share", "sync_line") if k not in got]
    if missing:
        return [f"the dict has no {', '.join(repr(m) for m in missing)} (keys: {sorted(map(str, got))[:6]})"]
    problems = []
    top = got["top_kernel"]
    if top != truth["top_kernel"]:
        by_count = max(readtrace.kernel_table(events), key=lambda t: t[2])[0]
        table = {n: (t, c) for n, t, c in readtrace.kernel_table(events)}
        if top == by_count:
            problems.append(f"top_kernel: {str(top)[:90]!r} is the most launched kernel ({table[top][1]} calls, "
                            f"{table[top][0]:.0f} µs in all), not the one with the most GPU time: sum the `dur` of "
                            f"each kernel's events")
        elif isinstance(top, str) and top in table:
            problems.append(f"top_kernel: {top[:90]!r} has {table[top][0]:.0f} µs in all; another kernel has more")
        else:
            problems.append(f"top_kernel: {str(top)[:90]!r} is not the name of a kernel in the trace")
    share = got["idle_share"]
    if isinstance(share, bool) or not isinstance(share, (int, float)):
        problems.append(f"idle_share: {type(share).__name__}, expected a float in [0, 1]")
    elif not abs(float(share) - truth["idle_share"]) <= IDLE_TOL:
        hint = ""
        if 1.0 < float(share) <= 100.0 and abs(float(share) / 100 - truth["idle_share"]) <= IDLE_TOL:
            hint = " (a percentage? return a fraction)"
        elif abs(float(share) - _summed_idle(events)) <= IDLE_TOL / 10 and \
                abs(_summed_idle(events) - truth["idle_share"]) > IDLE_TOL:
            hint = " (GPU events on two streams overlap: count overlapping time once)"
        problems.append(f"idle_share: {float(share):.3f} is off by more than {IDLE_TOL} from what the GPU events "
                        f"say{hint}; use the GPU's events (kernel, gpu_memcpy, gpu_memset), not the host's")
    sync = _line(got["sync_line"])
    if sync != truth["sync_line"]:
        lines = gen["lines"]
        what = {lines["copy"]: "issues the host-to-device copy (cudaMemcpyAsync returns at once: it does not wait)",
                lines["loader"]: "waits for the data loader (the host's time, not a GPU sync)",
                lines["loss"]: "computes the loss (it launches work; it does not wait)"}.get(sync)
        problems.append(f"sync_line: {str(got['sync_line'])[:60]!r} " + (what or "is not the line whose call "
                        "waits for the GPU") + "; look for the cuda_runtime event named cuda*Synchronize")
    return problems


EXERCISE = JudgedExercise(
    id="read_the_profile",
    function="read_the_profile",
    signature="read_the_profile(trace: list[dict]) -> dict",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("4 steps, batch copies on a second stream", {"iters": 4, "loader_us": (150.0, 600.0)}),
        Case("6 steps, copies on the compute stream", {"iters": 6, "loader_us": (150.0, 600.0), "prefetch": False}),
        Case("3 steps, a slow data loader, large batches", {"iters": 3, "loader_us": (1500.0, 3000.0),
                                                          "copy_us": (250.0, 400.0)}),
        Case("8 steps, a fast data loader", {"iters": 8, "loader_us": (20.0, 60.0)}),
    ),
    judge=judge,
)
