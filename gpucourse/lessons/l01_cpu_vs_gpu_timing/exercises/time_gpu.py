"""Lesson 01's exercise: a GPU timer that returns the right number. Judged against kernels of known duration."""
from __future__ import annotations

import math
import statistics
import time

from gpucourse import asyncqueue, device
from gpucourse.asyncqueue import sleep_kernel, synchronize
from gpucourse.grading.exercise import Case, JudgedExercise

STATEMENT = """\
Write `time_gpu(fn, *args, reps=10)` that returns how long one call `fn(*args)` takes, in milliseconds (a float):
the median of `reps` timed calls, after at least one untimed warm-up call.
`fn` only *queues* work on the device and returns before that work is done, so your timer must wait for the device:
`gpucourse.synchronize()` waits until everything queued so far has finished (it is `torch.cuda.synchronize()` on a
GPU, and waits for the course's stand-in device queue in CPU mode). CUDA events are fine on a GPU, but your function
must also work in CPU mode, where there are none; `time.perf_counter()` with synchronizations in the right places
works in both. The checker times kernels of known length: a plain one, one queued behind work that was already
waiting, and one whose first call is slow.
"""

TOLERANCE = 0.25  # relative, plus ABS_MS: sleeps on a busy machine overshoot by a little
ABS_MS = 0.15
# The tolerance also widens by the spread of the checker's own samples (a busy machine stretches sleeps and wake-ups),
# up to this fraction of the truth. Every wrong timer the cases tell apart is off by 2x or more (queued work: 4x;
# no warm-up: 30x; no synchronize: ~0; units: 1000x), so a right one may drift this far on a loaded machine.
MAX_TOLERANCE = 0.6
# Where every timer that reads too long is off by far more, a case may let a right one read longer still (its
# "stretch", a multiple of the checker's time): the queued case, whose wrong timers read 16x or more, once read a
# right timer at 2.3x the checker's time on a CI machine running two test suites at once (each of its two timed
# calls is half the median there, so one stretched call moves it; the checker's median of five does not move).
# Reading short is judged as everywhere: a timer that does not wait reads almost nothing.
ATTEMPTS = 4  # a mismatch is measured again, the checker's time and the learner's, before it counts


def _truth(fn, reps: int) -> tuple:
    """The checker's own measurement: synchronize, time one call, synchronize; (median, max - min) of ``reps``."""
    fn()
    samples = []
    for _ in range(reps):
        synchronize()
        t0 = time.perf_counter()
        fn()
        synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), max(samples) - min(samples)


def _device_idle() -> bool:
    """Whether everything queued so far has finished, without waiting (a timer that synchronized after its last
    call leaves the device idle; one that did not returns while that call still runs)."""
    if device.on_gpu():
        import torch

        if not torch.cuda.current_stream().query():
            return False
    q = asyncqueue._queue
    return not getattr(q, "unfinished_tasks", 0)


def _fresh_queue() -> None:
    """In CPU mode, the next kernel goes to a new stand-in device queue: the judge measures on an object the learner's
    code has never held (it could have replaced the methods of the one it used)."""
    synchronize()
    if not device.on_gpu():
        asyncqueue._queue = None


def _close(got: float, truth: float, spread: float = 0.0, stretch: float = 0.0) -> bool:
    allowed = min(TOLERANCE * truth + ABS_MS + spread, MAX_TOLERANCE * truth)
    if got > truth:
        allowed = max(allowed, stretch * truth)
    return abs(got - truth) <= allowed


def judge(time_gpu, params: dict, seed: int) -> list:
    ms = params["ms"]
    reps = params.get("reps", 10)
    stretch = params.get("stretch", 0.0)
    calls = {"n": 0}

    def work():
        calls["n"] += 1
        if params.get("slow_first") and calls["n"] == 1:
            time.sleep(params["slow_first"] / 1e3)  # e.g. compilation on the first call: host time
        sleep_kernel(ms)

    # A busy machine can stretch one measurement (a sleep that overshoots): a mismatch is measured again, both the
    # checker's time and the learner's, before it counts. A wrong timer is wrong every time.
    for attempt in range(ATTEMPTS):
        _fresh_queue()
        truth, spread = _truth(work, reps=5)
        synchronize()
        calls["n"] = 0
        if params.get("queued_ms"):
            sleep_kernel(params["queued_ms"])  # work someone else queued before the timer starts
        got = time_gpu(work, reps=reps)
        idle = _device_idle()
        synchronize()
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
            return [f"time_gpu returned {got!r}; it must return the time in milliseconds as a finite float"]
        if _close(got, truth, spread, stretch):
            break
    problems = []
    if calls["n"] < reps:
        problems.append(f"fn was called {calls['n']} times for reps={reps}: call it reps times (plus warm-up)")
    if not _close(got, truth, spread, stretch):  # one line: the grader's message is the first line of the first failed case
        why = ""
        # Units: an error of three orders of magnitude has no other cause among these cases (a slow first call or
        # queued work add at most tens of times the kernel), so the test is the ratio, not a match within the
        # tolerance, which a loaded machine can miss. The window is wide (100x to 10,000x) because a loaded machine
        # stretches the checker's time and the learner's differently (1185 ms returned in microseconds against a
        # 3.97 ms truth, 299x, once fell outside 300x-3000x); the other wrong timers are off by 30x at most.
        # The kernel's own length is a floor under any measurement of it, however loaded the machine: a result in
        # microseconds is at least 1000x it (a loaded machine stretched the checker's 1 ms kernel to 12 ms while the
        # learner's calls ran at 1.1 ms: 93x the checker's time, 1114x the kernel's), one in seconds at least 1/1000.
        ratio = got / truth if truth > 0 else float("inf")
        floor = got / ms
        if idle and (1 / 10000 <= ratio <= 1 / 100 or 1 / 1100 <= floor <= 1 / 20):
            why = ("about 1000x less than the measured time: did you return seconds? time_gpu returns milliseconds "
                   "((t1 - t0) * 1e3 with time.perf_counter())")
        elif idle and (100 <= ratio <= 10000 or 300 <= floor <= 100000):
            why = "about 1000x more than the measured time: did you return microseconds? time_gpu returns milliseconds"
        elif got < 0.5 * truth:
            why = ("far too short: that is the time to *queue* the work, not to run it. Wait for the device "
                   "(gpucourse.synchronize()) before you stop the clock")
        elif params.get("queued_ms") and got > truth:
            why = (f"too long: {params['queued_ms']} ms of work was already queued when time_gpu started. "
                   f"Synchronize before you start the clock, and time each call separately")
        elif params.get("slow_first") and got > truth:
            why = (f"too long: the first call is slow (compilation, allocation) and your result includes it. Make an "
                   f"untimed warm-up call first, then time reps={reps} calls and report their median")
        problems.append(f"returned {got:.3f} ms; one call takes {truth:.3f} ms (measured by the checker)"
                        + (f": {why}" if why else ""))
    return problems


EXERCISE = JudgedExercise(
    id="time_gpu",
    function="time_gpu",
    signature="time_gpu(fn, *args, reps=10) -> float (milliseconds)",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("a 2 ms kernel", {"ms": 2.0}),
        # reps=2: a timer that counts the queued work adds 15 ms to a 1 ms call, which a loaded machine cannot hide
        # (with reps=10 it added 3 ms, and a CI machine under load stretched the checker's own 1 ms kernel to 12 ms).
        # A timer that counts the queued work reads (30 + 2) / 2 = 16 ms or more: a right one may read up to 4x.
        Case("a 1 ms kernel queued behind 30 ms of earlier work",
             {"ms": 1.0, "queued_ms": 30.0, "reps": 2, "stretch": 3.0}),
        # reps=2: the median of two timed calls is their mean, so a timer that times the slow first call (no
        # warm-up) reports ~30 ms; with reps=10 the median would hide that call.
        Case("a 1 ms kernel whose first call takes 60 ms more, reps=2", {"ms": 1.0, "slow_first": 60.0, "reps": 2}),
    ),
    judge=judge,
)
