"""Lesson 01's second exercise: name the main bug in three GPU timing snippets."""
from __future__ import annotations

from gpucourse.grading.exercise import Case, JudgedExercise

BUGS = {
    "no_sync": "the clock stops before the GPU has finished: it times the launch, not the work",
    "first_call": "it times the first call, which includes compilation and allocation",
    "l2_cache": "the data stays in the L2 cache between repeats, so it measures cache, not memory, bandwidth",
    "clock_rampup": "the clocks were not steady: the GPU had just been idle and the timing stopped before they "
                    "settled under load (depending on the GPU that reads too slow or, boosting, too fast)",
}

# None of these is one of the lesson's own rows (other ops, sizes and code), and each has one main bug: a learner has
# to work out what the GPU does, not match a label.
SNIPPETS = {
    "A": '''def per_call_ms(fn, reps=20):
    fn()                                           # warm-up: compiles nothing, allocates the output
    torch.cuda.synchronize()                       # nothing else is queued
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e3

w = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
h = torch.randn(256, 8192, device="cuda", dtype=torch.float16)
ms = per_call_ms(lambda: torch.tanh(h @ w))''',
    "B": '''@torch.compile
def scaled_gelu(x):
    return torch.nn.functional.gelu(x) * 0.5

x = torch.randn(4096, 4096, device="cuda")
runs = []
for _ in range(5):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    scaled_gelu(x)
    torch.cuda.synchronize()
    runs.append((time.perf_counter() - t0) * 1e3)
ms = sum(runs) / len(runs)                         # the mean of five synchronized runs''',
    "C": '''a = torch.randn(2**20, device="cuda")             # 4 MB each; an H100 has 50 MB of L2
b = torch.randn(2**20, device="cuda")
c = torch.empty_like(a)
for _ in range(10):
    torch.add(a, b, out=c)                         # warm-up
torch.cuda.synchronize()
torch.cuda._sleep(20_000_000)                      # the GPU spins ~10 ms, touching no memory, while
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()                                     # the host queues the events and the 200 adds behind it
for _ in range(200):
    torch.add(a, b, out=c)
end.record()
end.synchronize()
gbs = 3 * a.nbytes / (start.elapsed_time(end) / 200 * 1e-3) / 1e9   # reported as "HBM bandwidth"''',
}

_ANSWERS = {"A": "no_sync", "B": "first_call", "C": "l2_cache"}
_HINTS = {
    "A": "the loop is warmed up and starts from an empty queue; is the GPU done with the 20 products when the "
         "second perf_counter runs?",
    "B": "the runs are synchronized; what does the first call of a torch.compile'd function do, and what does one "
         "such run do to a mean of five?",
    "C": "the sleep hides the launches, so the events time the 200 adds themselves; where are the 12 MB of a, b "
         "and c after the first of them?",
}

STATEMENT = "For each snippet, which of these is its main bug?\n" + "\n".join(
    f"  {k!r}: {v}" for k, v in BUGS.items()) + "\n\n" + "\n\n".join(
    f"Snippet {k}:\n{v}" for k, v in SNIPPETS.items()) + """

`torch.cuda._sleep(n)` queues a kernel that spins for n GPU clock cycles and touches no memory; queued ahead of
the events in snippet C, it keeps the GPU busy while the host queues the 200 adds, so the GPU then runs them back to
back and the events time the adds, not their launches.

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


EXERCISE = JudgedExercise(
    id="timing_bugs",
    function="timing_bugs",
    signature="timing_bugs() -> dict",
    statement=STATEMENT,
    kind="none",
    cases=tuple(Case(f"snippet {k}", {"snippet": k}) for k in SNIPPETS),
    judge=judge,
)
