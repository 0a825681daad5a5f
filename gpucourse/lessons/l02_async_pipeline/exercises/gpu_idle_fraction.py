"""Lesson 02's profiling exercise: the GPU's idle share of a profiled window, from the kernels of a trace.

Judged (``JudgedExercise``): each case names a trait of real profiler traces (kernels of two streams overlapping, a
short kernel nested in a long one, kernels crossing the window's edges or entirely outside it, the unsorted order a
trace lists them in, no kernel at all, kernels that touch and zero-length ones) and the judge draws a fresh trace with
that trait from the case's secret seed, so no table of answers passes. The answer must be within ``TOLERANCE`` of the
reference (an absolute tolerance on the fraction). A wrong answer is compared with what each common mistake gives on
the same trace, and a match names that mistake. The course's own ``gpucourse.timeline`` functions, which compute the
answer (lesson 02 prints it), are trapped while the learner's function runs.
"""
from __future__ import annotations

import math
import numbers
import random

from gpucourse import timeline
from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

STATEMENT = """\
Write `gpu_idle_fraction(kernels, t0, t1)` that returns the fraction of the window [t0, t1] in which the GPU runs no
kernel: a float in [0, 1] (1.0 when nothing ran, 0.0 when something ran all the time). It is the figure lesson 02
prints under its timelines ("GPU idle fraction").
`kernels` is a list of `(start_us, end_us)` pairs, the GPU kernels of a profiler trace in microseconds, as a trace
gives them: in no particular order; kernels of different streams overlap (time when two run at once is busy time
once, not twice); some start before t0 or end after t1, or lie entirely outside the window (only what falls inside
[t0, t1] counts); the list may be empty; a kernel may have zero length (start == end). t1 > t0 always.
Write it yourself: `gpucourse.timeline` computes this and is off limits here.
"""

TOLERANCE = 1e-9  # absolute, on the fraction: the window is ~1e3 us and stamps have 3 decimals, so float64 is exact
# to far better than this whatever the order of the sums


def _stamp(x: float) -> float:
    """A time as a profiler gives it: microseconds with three decimals (nanoseconds)."""
    return round(x, 3)


def _stream(rng: random.Random, a: float, b: float, length=(5.0, 60.0), gap=(2.0, 40.0)) -> list:
    """Back-to-back kernels of one stream from ``a`` to about ``b``: lengths and gaps drawn from the ranges."""
    out, t = [], a
    while True:
        s, e = t, t + rng.uniform(*length)
        if e > b:
            return out
        out.append((_stamp(s), _stamp(e)))
        t = e + rng.uniform(*gap)


def _window(rng: random.Random) -> tuple:
    t0 = _stamp(rng.uniform(0.0, 5000.0))
    return t0, _stamp(t0 + rng.uniform(1000.0, 3000.0))


def _inside(rng: random.Random, t0: float, t1: float) -> tuple:
    """The part of the window a stream fills: idle time is left before the first kernel and after the last."""
    w = t1 - t0
    return t0 + rng.uniform(0.05, 0.15) * w, t1 - rng.uniform(0.05, 0.15) * w


def _overlapping(rng: random.Random, t0: float, t1: float) -> list:
    """Two streams: one's kernels, and kernels of another that each start during one of them and end after it."""
    a, b = _inside(rng, t0, t1)
    first = _stream(rng, a, b)
    second = []
    for s, e in first:
        if rng.random() < 0.6:
            s2 = s + rng.uniform(0.2, 0.8) * (e - s)
            second.append((_stamp(s2), _stamp(e + rng.uniform(1.0, 30.0))))
    if not second:  # at least one overlap
        s, e = first[0]
        second.append((_stamp((s + e) / 2), _stamp(e + 10.0)))
    return first + second


def _nested(rng: random.Random, t0: float, t1: float) -> list:
    """Long kernels, each with short kernels of another stream strictly inside it (they end before it does)."""
    a, b = _inside(rng, t0, t1)
    out = []
    for s, e in _stream(rng, a, b, length=(60.0, 200.0), gap=(10.0, 80.0)):
        out.append((s, e))
        t = s
        for _ in range(rng.randint(1, 3)):
            ns = t + rng.uniform(2.0, 15.0)
            ne = ns + rng.uniform(1.0, 10.0)
            if ne >= e - 1.0:
                break
            out.append((_stamp(ns), _stamp(ne)))
            t = ne
    return out


def _edges(rng: random.Random, t0: float, t1: float) -> list:
    """Kernels entirely before t0, one across t0, some inside, one across t1, kernels entirely after t1."""
    before = [(_stamp(t0 - 300.0 + 40.0 * i), _stamp(t0 - 300.0 + 40.0 * i + rng.uniform(5.0, 30.0)))
              for i in range(rng.randint(1, 3))]
    across0 = (_stamp(t0 - rng.uniform(20.0, 200.0)), _stamp(t0 + rng.uniform(20.0, 200.0)))
    across1 = (_stamp(t1 - rng.uniform(20.0, 200.0)), _stamp(t1 + rng.uniform(20.0, 200.0)))
    middle = _stream(rng, across0[1] + rng.uniform(50.0, 100.0), across1[0] - rng.uniform(50.0, 100.0))
    after = [(_stamp(t1 + 250.0 + 40.0 * i), _stamp(t1 + 250.0 + 40.0 * i + rng.uniform(5.0, 30.0)))
             for i in range(rng.randint(1, 3))]
    return before + [across0] + middle + [across1] + after


def _touching(rng: random.Random, t0: float, t1: float) -> list:
    """Kernels that start exactly where the previous one ended, zero-length kernels (in gaps, inside kernels, on the
    window's edges), and kernels that end exactly at t0 or start exactly at t1."""
    a, b = _inside(rng, t0, t1)
    out, t = [], a
    while True:
        e = _stamp(t + rng.uniform(5.0, 60.0))
        if e > b:
            break
        out.append((t, e))
        if rng.random() < 0.3:
            out.append((_stamp((t + e) / 2), _stamp((t + e) / 2)))  # zero-length, inside a kernel
        if rng.random() < 0.5:
            t = e  # the next kernel touches this one
        else:
            gap = rng.uniform(2.0, 40.0)
            out.append((_stamp(e + gap / 2), _stamp(e + gap / 2)))  # zero-length, in a gap
            t = _stamp(e + gap)
    out += [(t0, t0), (t1, t1), (_stamp(t0 - 25.0), t0), (t1, _stamp(t1 + 25.0))]
    return out


def _shuffled(rng: random.Random, kernels: list) -> list:
    """The kernels in a trace's order: shuffled, never sorted by start."""
    out = list(kernels)
    rng.shuffle(out)
    if len(out) > 1 and out == sorted(out):
        out.reverse()
    return out


def make_inputs(params: dict, rng: random.Random) -> tuple:
    """(kernels, t0, t1) for one case: a fresh trace with the case's trait (``params["trace"]``). Every trace but
    "unsorted" and "everything" lists the kernels sorted by start (so each case catches its own mistake); every
    window has idle time before its first kernel and after its last."""
    t0, t1 = _window(rng)
    trace = params["trace"]
    if trace == "one stream":
        kernels = _stream(rng, *_inside(rng, t0, t1))
    elif trace == "overlapping":
        kernels = sorted(_overlapping(rng, t0, t1))
    elif trace == "nested":
        kernels = sorted(_nested(rng, t0, t1))
    elif trace == "edges":
        kernels = sorted(_edges(rng, t0, t1))
    elif trace == "unsorted":
        kernels = _shuffled(rng, _overlapping(rng, t0, t1))
    elif trace == "empty":
        kernels = []
    elif trace == "touching":
        kernels = sorted(_touching(rng, t0, t1))
    elif trace == "everything":
        w = t1 - t0
        kernels = _overlapping(rng, t0, t0 + w / 3) + _nested(rng, t0 + w / 3, t0 + 2 * w / 3) + \
            [k for k in _edges(rng, t0, t1) if not t0 < k[0] < k[1] < t1] + \
            [k for k in _touching(rng, t0 + 2 * w / 3, t1) if k[0] == k[1]]
        kernels = _shuffled(rng, kernels)
    else:
        raise ValueError(f"unknown trace {trace!r}")
    return kernels, t0, t1


def _union(kernels) -> list:
    """The kernels' union: sorted, disjoint (start, end) pairs."""
    out = []
    for s, e in sorted(kernels):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _clipped(s: float, e: float, t0: float, t1: float) -> float:
    return max(0.0, min(e, t1) - max(s, t0))


def reference(kernels, t0: float, t1: float) -> float:
    busy = sum(_clipped(s, e, t0, t1) for s, e in _union(kernels))
    return 1.0 - busy / (t1 - t0)


# --- what the common mistakes give, to name the one a wrong answer matches ------------------------------------------


def _summed(kernels, t0, t1):
    return 1.0 - sum(_clipped(s, e, t0, t1) for s, e in kernels) / (t1 - t0)


def _summed_unclipped(kernels, t0, t1):
    return 1.0 - sum(e - s for s, e in kernels) / (t1 - t0)


def _unclipped(kernels, t0, t1):
    return 1.0 - sum(e - s for s, e in _union(kernels)) / (t1 - t0)


def _merged_as_given(kernels, t0, t1, keep_max=True):
    out = []
    for s, e in kernels:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e) if keep_max else e)
        else:
            out.append((s, e))
    return 1.0 - sum(_clipped(s, e, t0, t1) for s, e in out) / (t1 - t0)


def _last_end(kernels, t0, t1):
    return _merged_as_given(sorted(kernels), t0, t1, keep_max=False)


def _gaps_only(kernels, t0, t1):
    u = [(max(s, t0), min(e, t1)) for s, e in _union(kernels) if min(e, t1) > max(s, t0)]
    return sum(b[0] - a[1] for a, b in zip(u, u[1:])) / (t1 - t0)


MISTAKES = (  # (what the mistake computes, the hint naming it), most specific first
    (_summed, "that is what adding up every kernel's length gives: kernels of different streams overlap, and time "
              "when two run at once is busy once, not twice; merge the intervals (their union) first"),
    (_unclipped, "that is what the kernels' union gives without clipping it to the window: a kernel that starts "
                 "before t0 or ends after t1 counts only inside [t0, t1], and one entirely outside not at all"),
    (_summed_unclipped, "that is what adding up every kernel's whole length gives: overlapping kernels are counted "
                        "twice (merge the intervals first) and kernels across the window's edges are not clipped to "
                        "[t0, t1]"),
    (_merged_as_given, "that is what merging the kernels in the order given gives: a trace lists them unsorted; "
                       "sort them by start time first"),
    (_last_end, "a kernel nested inside a longer one ends before it: when merging, keep the later of the two ends "
                "(max), not the last kernel's end"),
    (_gaps_only, "that counts only the gaps between kernels: the time from t0 to the first kernel and from the last "
                 "kernel to t1 is idle too"),
    (lambda k, t0, t1: 1.0 - reference(k, t0, t1), "that is the busy fraction: return the share of the window in "
                                                   "which NO kernel runs"),
    (lambda k, t0, t1: reference(k, t0, t1) * (t1 - t0), "that is the idle time in microseconds: divide it by the "
                                                         "window's length, t1 - t0"),
    (lambda k, t0, t1: 100.0 * reference(k, t0, t1), "that is a percentage: return a fraction in [0, 1]"),
)


def mistake(kernels, t0: float, t1: float, got: float) -> str | None:
    """The hint of the first common mistake whose answer on this trace is ``got`` (and is not the right one)."""
    right = reference(kernels, t0, t1)
    for compute, hint in MISTAKES:
        try:
            v = compute(list(kernels), t0, t1)
        except Exception:  # noqa: BLE001 - a mistake that cannot be made on this trace
            continue
        if math.isfinite(v) and abs(v - right) > TOLERANCE and abs(got - v) <= TOLERANCE * max(1.0, abs(v)):
            return hint
    return None


def compare_answer(kernels, t0: float, t1: float, expected: float, got) -> list:
    """Problems with the learner's answer on one trace (empty: right)."""
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        return [f"returned {type(got).__name__} {got!r:.60}, expected a float in [0, 1]"]
    got = float(got)
    if math.isfinite(got) and abs(got - expected) <= TOLERANCE:
        return []
    where = f"window [{t0}, {t1}] us, {len(kernels)} kernel(s)"
    line = f"idle fraction expected {expected:.6f}, got {got:.6f} ({where})"
    if not kernels:  # every mistake above gives 0 or 1 here: say what the empty trace means instead
        hint = "no kernel ran, so the GPU was idle for the whole window: 1.0"
    else:
        hint = mistake(kernels, t0, t1, got) if math.isfinite(got) else None
    if hint is None and not 0.0 <= got <= 1.0:
        hint = "a fraction of the window is in [0, 1]"
    return [line + (f": {hint}" if hint else "")]


def judge(fn, params: dict, seed: int) -> list:
    """Run the learner's ``fn`` on a fresh trace for this case and say what is wrong. The trace comes from ``seed``
    (secret, fresh per check); the expected answer is computed before ``fn`` sees its own copy of the list."""
    kernels, t0, t1 = make_inputs(params, random.Random(seed))
    expected = reference(list(kernels), t0, t1)
    with trapped(timeline.idle_fraction, timeline.busy_time, timeline.merge):  # the course's own answer
        got = fn(list(kernels), t0, t1)
    return compare_answer(kernels, t0, t1, expected, got)


EXERCISE = JudgedExercise(
    id="gpu_idle_fraction",
    function="gpu_idle_fraction",
    signature="gpu_idle_fraction(kernels: list, t0: float, t1: float) -> float",
    statement=STATEMENT,
    kind="none",
    cases=(  # each a trait of real traces; the kernels are drawn afresh from each case's seed
        Case("one stream, sorted, inside the window", {"trace": "one stream"}),
        Case("two streams overlapping", {"trace": "overlapping"}),
        Case("short kernels nested in long ones", {"trace": "nested"}),
        Case("kernels across the window's edges and outside it", {"trace": "edges"}),
        Case("unsorted, as a trace lists them", {"trace": "unsorted"}),
        Case("no kernel at all", {"trace": "empty"}),
        Case("touching and zero-length kernels", {"trace": "touching"}),
        Case("a whole trace: all of the above, unsorted", {"trace": "everything"}),
    ),
    judge=judge,
)
