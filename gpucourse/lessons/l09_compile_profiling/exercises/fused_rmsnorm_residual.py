"""Lesson 09's first exercise: the residual add and RMSNorm of a transformer block, fused in one Triton kernel.

The answer is a pair ``(out, new_residual)``, which the checker's comparison of one output does not take, so the
exercise is judged (``JudgedExercise``) by the checker's own pieces, once per output: the inputs inside canary
memory, allocations poisoned, compute ops on the inputs or on what was derived from them recorded, the call made
twice (bitwise the same) and once more with every Triton launch skipped (what a launch that did nothing leaves),
then :func:`checker.evaluate` for ``out`` and for ``new_residual`` against the float64 reference, each as an output
of the compared exercise ``PER_OUTPUT`` (its inputs, reference, tolerance, determinism and launch limit). Launches are
counted here, by a wrapper around Triton's launch path that this module holds itself: the grader's worker puts the
course's modules back as they were after each call into the learner's function (judging.sealed), which resets the
counters launches.py keeps at module level.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import importlib

import torch

from gpucourse import device
from gpucourse.grading import checker, launches
from gpucourse.grading.exercise import Case, Exercise, JudgedExercise, Perf, Tolerance, between, drawn
from gpucourse.grading.traps import trapped

from .. import kernels  # at module level: loaded before a graded submission is (see JudgedExercise)

STATEMENT = """\
Write `fused_rmsnorm_residual(x, residual, weight, eps)` that returns `(out, new_residual)`, two new tensors shaped
and typed like `x`, computed by ONE launch of a Triton kernel of yours:
  new_residual = x + residual                          (rounded to x's dtype, as it is stored)
  out = new_residual / sqrt(mean(new_residual**2 over the last dim) + eps) * weight
x and residual are (rows, n) or (batch, seq, n), float16, bfloat16 or float32, n from 1 up to 16384 (rarely a
power of two); weight is (n,) of the same dtype; eps is a Python float. Their last dimension is contiguous; rows
may be strided (use the row stride). Accumulate the mean of squares in float32 (float16 overflows past 65504) and
keep eps inside the square root. Both outputs are written by your kernel: x and residual are read once, out and
new_residual written once (in a transformer the sum is the next block's residual stream). Do not modify the
inputs. Your kernel must compute the answer: a torch compute op (arithmetic, a reduction, torch.compile's own
kernels...) on the inputs or on anything derived from them fails the check, which names it; allocating, viewing,
copying and filling tensors is fine.
Speed (on a GPU, apart from correctness): at 8192x8192 bfloat16 your kernel's GB/s (the 4 bytes per element it
must move) against a copy of the same bytes timed beside it; target 0.85 of the copy's. That copy is the ceiling:
torch.compile of the same function reaches it too (without CUDA graphs, whose copies of new inputs would be timed
with it), so the goal is to match the compiler, not to beat it.
"""


def _b(lo: int, hi: int, odd: bool = False) -> dict:
    """A size drawn per run from [lo, hi] (exercise.between), written as plain data: a judged case's parameters
    travel to the grader's worker by pickling, which a Draw (it holds a closure) does not survive."""
    return {"between": (lo, hi, odd)}


def _draws(params):
    if isinstance(params, dict) and set(params) == {"between"}:
        return between(*params["between"])
    if isinstance(params, dict):
        return {k: _draws(v) for k, v in params.items()}
    if isinstance(params, (tuple, list)):
        return type(params)(_draws(v) for v in params)
    return params


def make_inputs(params: dict, gen) -> tuple:
    shape = params["shape"]
    dtype = getattr(torch, params.get("dtype", "float32"))
    scale = params.get("scale", 1.0)
    n = shape[-1]
    step = params.get("row_step", 1)
    big = (*shape[:-1], n * step) if step > 1 else shape
    x = (torch.randn(big, generator=gen) * scale)[..., :n].to(dtype)
    residual = (torch.randn(big, generator=gen) * scale)[..., :n].to(dtype)
    weight = (1.0 + 0.5 * torch.randn(n, generator=gen)).to(dtype)
    return x, residual, weight, float(params.get("eps", 1e-6))


def reference(x, residual, weight, eps):
    """float64, from the sum rounded to x's dtype (what a kernel stores and the next block reads)."""
    s = (x.double() + residual.double()).to(x.dtype)
    sd = s.double()
    out = sd / torch.sqrt(sd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    return out.to(x.dtype), s


def copy_bytes(x, residual, weight, eps=None) -> int:
    return kernels.moved_bytes(x, residual, weight)


def _kernel_name(kernel) -> str:
    fn = kernel
    while fn is not None and not hasattr(fn, "__name__") and hasattr(fn, "fn"):
        fn = fn.fn
    return getattr(fn, "__name__", type(kernel).__name__)


@contextlib.contextmanager
def _tallying(mine: collections.Counter, course: collections.Counter):
    """Inside the block, launches of Triton kernels are tallied into ``mine`` (the course's own kernels into
    ``course``), by a wrapper this judge holds on Triton's classes (outside launches.py's, so it sees each outer
    launch once). Warm-up launches of the autotuner are not counted, as launches.py does not count them."""
    launches.install()
    saved = []
    for module_name, cls_name in launches._TARGETS:
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError):
            continue
        orig = cls.__dict__.get("run")
        if orig is None:
            continue

        def run(self, *args, __orig=orig, **kwargs):
            if not kwargs.get("warmup", False) and launches._state["depth"] == 0:
                (course if launches.is_course_kernel(self) else mine)[_kernel_name(self)] += 1
            return __orig(self, *args, **kwargs)

        functools.update_wrapper(run, orig)
        saved.append((cls, orig))
        cls.run = run
    try:
        yield
    finally:
        for cls, orig in saved:
            cls.run = orig


def _call(fn, args, skip=False):
    """One call through checker.run_call, with launches tallied by :func:`_tallying`."""
    mine, course = collections.Counter(), collections.Counter()
    with _tallying(mine, course):
        res = checker.run_call(PER_OUTPUT, fn, args, skip_launches=skip)
    res["triton_launches"], res["course_launches"] = dict(mine), dict(course)
    return res


def _pair(out) -> tuple | str:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return f"returned {type(out).__name__}, expected a pair (out, new_residual)"
    return tuple(out)


def judge(fn, params: dict, seed: int) -> list:
    """Make the inputs from ``seed``, call ``fn`` as the checker does, and judge ``out`` and ``new_residual`` each
    with checker.evaluate."""
    spec = Case("case", _draws(params))
    case = checker.drawn_case(spec, seed, 0)
    args, expected = checker.make_case(PER_OUTPUT, case, seed, 0)
    dev_args = checker.to_device(args, device.torch_device())
    second = checker.clone_args(dev_args)
    with trapped(kernels.fused_rmsnorm_residual):
        first = _call(fn, dev_args)
        again = _call(fn, second)
        try:
            noop = _call(fn, checker.clone_args(dev_args), skip=True)["out"]
        except Exception:  # noqa: BLE001 - it needs what its kernels compute: as it should
            noop = None
    got, got2 = _pair(first["out"]), _pair(again["out"])
    if isinstance(got, str):
        return [got]
    noop = noop if isinstance(noop, (tuple, list)) and len(noop) == 2 else (None, None)
    overruns = list(first["overruns"]) + checker.memory_problem(PER_OUTPUT, dev_args, [first, again])
    uses = dict(first["uses"])
    for k, v in again["uses"].items():
        uses[k] = max(uses.get(k, 0), v)
    launched = {k: max(first["triton_launches"].get(k, 0), again["triton_launches"].get(k, 0))
                for k in set(first["triton_launches"]) | set(again["triton_launches"])}
    course = dict(first["course_launches"], **again["course_launches"])
    problems = []
    for i, name in enumerate(("out", "new_residual")):
        other = got2[i] if not isinstance(got2, str) else None
        outcome = {"out": got[i], "out2": other, "noop_out": noop[i], "overruns": overruns if i == 0 else [],
                   "buffers_after": [a.get("buffer") for a in dev_args] if i == 0 else [],
                   "aliasing": checker.aliasing(dev_args, got[i], other),
                   "triton_launches": launched, "uses": uses if i == 0 else {},
                   "course_launches": course if i == 0 else {}, "ops": first["ops"]}
        verdict = checker.evaluate(PER_OUTPUT, case, args, expected[i], outcome, device.torch_device().type)
        for p in verdict.problems + [f"hint: {h}" for h in verdict.hints]:
            p = p if i == 0 and not _about_values(p) else f"{name}: {p}"
            if p not in problems and p.split(": ", 1)[-1] not in [q.split(": ", 1)[-1] for q in problems]:
                problems.append(p)
    where = [checker.storage_start(t) for t in got]  # None for what is not a tensor with memory
    if where[0] is not None and where[0] == where[1]:
        problems.append("out and new_residual share memory: return two separate tensors")
    if problems:
        what = drawn(spec.params, case.params)
        if what:
            problems.append(f"sizes drawn for this run: {what}")
    return problems


_VALUE_WORDS = ("mismatch", "element", "NaN", "nan", "inf", "shape", "dtype", "device", "wrong", "expected",
                "never written", "contiguous", "nondeterministic", "output")


def _about_values(problem: str) -> bool:
    """A problem about one output's values or form (named per output), not about the call as a whole."""
    return any(w in problem for w in _VALUE_WORDS) and "launched" not in problem and "uses torch" not in problem


_BIG = device.size(cpu=_b(1500, 2500, odd=True), gpu=_b(12000, 16384, odd=True))

_SIGNATURE = ("fused_rmsnorm_residual(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> "
              "tuple[Tensor, Tensor]")
# bf16: out is computed from a sum that may be rounded or not before the norm; a few units of 2^-8.
_TOLERANCE = {"float32": Tolerance(1e-5, 1e-6), "float16": Tolerance(2e-3, 2e-3), "bfloat16": Tolerance(1.6e-2, 1.6e-2)}

# Each of the two outputs, as the output of a compared exercise: what the judge hands checker.make_case (inputs and
# the float64 reference), checker.run_call and checker.evaluate. Its cases are the judge's, one per call.
PER_OUTPUT = Exercise(
    id="fused_rmsnorm_residual",
    function="fused_rmsnorm_residual",
    signature=_SIGNATURE,
    statement=STATEMENT,
    kind="triton",
    make_inputs=make_inputs,
    reference=reference,
    cases=(),
    tolerance=_TOLERANCE,
    determinism="bitwise",
    max_launches=1,
)

EXERCISE = JudgedExercise(
    id="fused_rmsnorm_residual",
    function="fused_rmsnorm_residual",
    signature=_SIGNATURE,
    statement=STATEMENT,
    kind="triton",
    cases=(
        Case("1 row of 1", {"shape": (1, 1)}),
        Case("ragged n, float32", {"shape": (_b(3, 9), _b(100, 300, odd=True))}),
        Case("n = 4096, float16", {"shape": (_b(3, 6), 4096), "dtype": "float16"}),
        Case("(batch, seq, n), bfloat16", {"shape": (2, _b(3, 7), _b(500, 800)), "dtype": "bfloat16"}),
        Case("strided rows", {"shape": (_b(4, 8), _b(200, 400)), "row_step": 2}),
        Case("tiny values (x1e-3), eps 1e-5", {"shape": (_b(3, 6), _b(300, 500)), "scale": 1e-3,
                                              "eps": 1e-5}),
        Case("large values (x40), float16", {"shape": (3, _b(3000, 4000)), "scale": 40.0, "dtype": "float16"}),
        Case("long rows, bfloat16", {"shape": (2, _BIG), "dtype": "bfloat16"}),
    ),
    tolerance=_TOLERANCE,
    perf=Perf(baseline="copy", target=0.85, params={"shape": (8192, 8192), "dtype": "bfloat16"}, bytes=copy_bytes,
              make_inputs=make_inputs),
    judge=judge,
)
