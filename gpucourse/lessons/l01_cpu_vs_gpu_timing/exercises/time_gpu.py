"""Lesson 01's exercise: a GPU timer that returns the right number. Judged against kernels of known duration."""
from __future__ import annotations

import math
import statistics
import time

from gpucourse.asyncqueue import sleep_kernel, synchronize
from gpucourse.grading.exercise import Case, Exercise

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


def _truth(fn, reps: int) -> float:
    """The checker's own measurement: synchronize, time one call, synchronize; median of ``reps``."""
    fn()
    samples = []
    for _ in range(reps):
        synchronize()
        t0 = time.perf_counter()
        fn()
        synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def judge(time_gpu, params: dict, seed: int) -> list:
    ms = params["ms"]
    calls = {"n": 0}

    def work():
        calls["n"] += 1
        if params.get("slow_first") and calls["n"] == 1:
            time.sleep(params["slow_first"] / 1e3)  # e.g. compilation on the first call: host time
        sleep_kernel(ms)

    # A busy machine can stretch one measurement (a sleep that overshoots): a mismatch is measured once more, both
    # the checker's time and the learner's, before it counts. A wrong timer is wrong both times.
    for attempt in range(2):
        synchronize()
        truth = _truth(work, reps=5)
        synchronize()
        calls["n"] = 0
        if params.get("queued_ms"):
            sleep_kernel(params["queued_ms"])  # work someone else queued before the timer starts
        got = time_gpu(work, reps=10)
        synchronize()
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
            return [f"time_gpu returned {got!r}; it must return the time in milliseconds as a finite float"]
        if abs(got - truth) <= TOLERANCE * truth + ABS_MS:
            break
    problems = []
    if calls["n"] < 10:
        problems.append(f"fn was called {calls['n']} times for reps=10: call it reps times (plus warm-up)")
    if abs(got - truth) > TOLERANCE * truth + ABS_MS:
        problems.append(f"returned {got:.3f} ms; one call takes {truth:.3f} ms (measured by the checker)")
        if got < 0.5 * truth:
            problems.append("far too short: that is the time to *queue* the work, not to run it. Wait for the "
                            "device (gpucourse.synchronize()) before you stop the clock")
        elif params.get("queued_ms") and got > truth:
            problems.append(f"too long: {params['queued_ms']} ms of work was already queued when time_gpu "
                            f"started. Synchronize before you start the clock, and time each call separately")
        elif params.get("slow_first") and got > truth:
            problems.append("too long: the first call is slow (compilation, allocation); do an untimed warm-up "
                            "call and report the median, not the mean")
    return problems


EXERCISE = Exercise(
    id="time_gpu",
    function="time_gpu",
    signature="time_gpu(fn, *args, reps=10) -> float (milliseconds)",
    statement=STATEMENT,
    kind="none",
    make_inputs=None,
    reference=None,
    cases=(
        Case("a 2 ms kernel", {"ms": 2.0}),
        Case("a 1 ms kernel queued behind 30 ms of earlier work", {"ms": 1.0, "queued_ms": 30.0}),
        Case("a 1 ms kernel whose first call takes 60 ms more", {"ms": 1.0, "slow_first": 60.0}),
    ),
    determinism=None,
    judge=judge,
)
