"""Lesson 01's second exercise: name the main bug in three GPU timing snippets."""
from __future__ import annotations

from gpucourse.grading.exercise import Case, Exercise

BUGS = {
    "no_sync": "the clock stops before the GPU has finished: it times the launch, not the work",
    "first_call": "it times the first call, which includes compilation and allocation",
    "l2_cache": "the data stays in the L2 cache between repeats, so it measures cache, not memory, bandwidth",
    "clock_rampup": "the GPU was idle before, so it ran at low clocks during the measurement",
}

SNIPPETS = {
    "A": '''x = torch.randn(4096, 4096, device="cuda")
t0 = time.perf_counter()
y = x @ x
ms = (time.perf_counter() - t0) * 1e3''',
    "B": '''f = torch.compile(lambda x: torch.relu(x) * 2)
x = torch.randn(2**24, device="cuda")
torch.cuda.synchronize()
t0 = time.perf_counter()
f(x)
torch.cuda.synchronize()
ms = (time.perf_counter() - t0) * 1e3''',
    "C": '''x = torch.randn(2**21, device="cuda")           # 8 MB; an H100 has 50 MB of L2
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for _ in range(10):
    y = x * 2                                      # warm-up
start.record()
for _ in range(1000):
    y = x * 2
end.record()
torch.cuda.synchronize()
gbs = 2 * x.nbytes / (start.elapsed_time(end) / 1000 * 1e-3) / 1e9   # reported as "HBM bandwidth"''',
}

_ANSWERS = {"A": "no_sync", "B": "first_call", "C": "l2_cache"}
_HINTS = {
    "A": "what is the CPU doing while the GPU runs x @ x, and when does perf_counter run?",
    "B": "how many times is f called, and what happens the first time a compiled function runs?",
    "C": "the loop synchronizes properly and warms up; where do the 16 MB of x and y live between iterations?",
}

STATEMENT = "For each snippet, which of these is its main bug?\n" + "\n".join(
    f"  {k!r}: {v}" for k, v in BUGS.items()) + "\n\n" + "\n\n".join(
    f"Snippet {k}:\n{v}" for k, v in SNIPPETS.items()) + """

Write `timing_bugs()` that returns a dict {"A": ..., "B": ..., "C": ...} with one key of BUGS per snippet.
"""


def judge(fn, params: dict, seed: int) -> list:
    answers = fn()
    snippet = params["snippet"]
    if not isinstance(answers, dict):
        return [f"timing_bugs() returned {type(answers).__name__}; return a dict like {{'A': 'no_sync', ...}}"]
    if snippet not in answers:
        return [f"no answer for snippet {snippet!r}"]
    got = answers[snippet]
    if not isinstance(got, str) or got not in BUGS:
        return [f"{got!r} is not one of {sorted(BUGS)}"]
    if got != _ANSWERS[snippet]:
        return [f"{got!r} is not the main bug of snippet {snippet}", f"hint: {_HINTS[snippet]}"]
    return []


EXERCISE = Exercise(
    id="timing_bugs",
    function="timing_bugs",
    signature="timing_bugs() -> dict",
    statement=STATEMENT,
    kind="none",
    make_inputs=None,
    reference=None,
    cases=tuple(Case(f"snippet {k}", {"snippet": k}) for k in SNIPPETS),
    determinism=None,
    judge=judge,
)
