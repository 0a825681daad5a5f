"""What an exercise is: plain data that the checker and the batch grader read (like popcorn's task.yml), and the
registry that finds every exercise.

An exercise names the function the learner writes, the kind of kernel it must launch, its named cases, the
tolerance per dtype and (GPU only) a speed target. It comes in two forms: compared (:class:`Exercise`: how to make
inputs for each case and the reference that gives the right answer) and judged (:class:`JudgedExercise`: a judge
that calls the learner's function itself and says what is wrong). ``ex.judge is not None`` tells them apart. The
checker never contains per-exercise code: a lesson adds an exercise by adding one module to its ``exercises/``
package (``gpucourse/lessons/lNN_topic/exercises/<id>.py``) that defines ``EXERCISE``; :func:`get` and
:func:`all_ids` find it by discovery.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Callable

from .. import dtypes

KINDS = ("triton", "cuda", "none")


@dataclasses.dataclass(frozen=True)
class Case:
    """One named input configuration, e.g. ``Case("n=1025", {"n": 1025})``; ``params`` go to ``make_inputs``."""

    name: str
    params: dict


class Draw:
    """A size drawn fresh for every run from a class of sizes, e.g. ``below_pow2(8, 12)``: 255, 510, 1023...

    Cases name the class ("just below a power of two") and give a Draw in place of a number in their ``params`` (a
    value or an element of a shape tuple); the checker and the grader replace every Draw with a number drawn from the
    run's secret seed before ``make_inputs`` sees the parameters (:func:`resolve`). The batch grader draws in its own
    process and sends the worker only the tensors, so a submission cannot learn the sizes before it is called, and a
    kernel right only on the sizes a spec lists fails."""

    def __init__(self, describe: str, pick: Callable):
        self.describe, self._pick = describe, pick

    def draw(self, gen) -> int:
        return int(self._pick(gen))

    def __repr__(self) -> str:
        return f"<{self.describe}>"


def _randint(gen, lo: int, hi: int) -> int:
    """An integer in [lo, hi], from a torch.Generator."""
    import torch

    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def between(lo: int, hi: int, odd: bool = False, step: int = 1) -> Draw:
    """Any size in [lo, hi] that is not a power of two (odd only, with ``odd``: no block size divides it; a multiple
    of ``step`` from ``lo`` with ``step``, e.g. whole quantization groups)."""
    def pick(gen):
        while True:
            n = lo + step * _randint(gen, 0, (hi - lo) // step)
            if odd and n % 2 == 0:
                n = n + 1 if n < hi else n - 1
            if not _is_pow2(n) or lo == hi:
                return n
    return Draw(f"{'odd ' if odd else ''}size in [{lo}, {hi}]" + (f" step {step}" if step > 1 else ""), pick)


def below_pow2(lo_exp: int, hi_exp: int, most: int = 3) -> Draw:
    """2**k - d for k in [lo_exp, hi_exp] and d in [1, most]: just below a power of two (a last block short by a
    little)."""
    return Draw(f"2**[{lo_exp}..{hi_exp}] - [1..{most}]",
                lambda gen: 2 ** _randint(gen, lo_exp, hi_exp) - _randint(gen, 1, most))


def above_pow2(lo_exp: int, hi_exp: int, most: int = 3) -> Draw:
    """2**k + d for k in [lo_exp, hi_exp] and d in [1, most]: just above a power of two (one more, nearly empty
    block)."""
    return Draw(f"2**[{lo_exp}..{hi_exp}] + [1..{most}]",
                lambda gen: 2 ** _randint(gen, lo_exp, hi_exp) + _randint(gen, 1, most))


def one_of(*values: int) -> Draw:
    """One of ``values`` (e.g. a stride of 2 or 3)."""
    return Draw(f"one of {values}", lambda gen: values[_randint(gen, 0, len(values) - 1)])


def resolve(params, gen):
    """``params`` with every :class:`Draw` (in values, tuples and lists) replaced by a number drawn from ``gen``."""
    if isinstance(params, Draw):
        return params.draw(gen)
    if isinstance(params, dict):
        return {k: resolve(v, gen) for k, v in params.items()}
    if isinstance(params, (tuple, list)):
        return type(params)(resolve(v, gen) for v in params)
    return params


def has_draws(params) -> bool:
    if isinstance(params, Draw):
        return True
    if isinstance(params, dict):
        return any(has_draws(v) for v in params.values())
    if isinstance(params, (tuple, list)):
        return any(has_draws(v) for v in params)
    return False


def drawn(case_params: dict, resolved: dict) -> str:
    """The drawn values of a case, as "n=1021" or "shape=(37, 1029)" (empty when the case draws nothing)."""
    return ", ".join(f"{k}={resolved[k]}" for k, v in case_params.items() if has_draws(v))


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """``|got - expected| <= atol + rtol * |expected|`` elementwise, with ``atol = atol_scale * max|expected|``.

    The absolute part is scaled by the data, so an all-zeros answer never passes against a non-zero reference.
    """

    rtol: float
    atol_scale: float


# torch ops that compute attention or its pieces: an attention exercise (lessons 08 and 11) forbids them in the
# learner's function and finds the reference's time from them.
ATTENTION_OPS = ("aten.mm", "aten.bmm", "aten.matmul", "aten.addmm", "aten.baddbmm", "aten._softmax", "aten.softmax",
                 "aten._safe_softmax", "aten._log_softmax", "aten.scaled_dot_product_attention",
                 "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
                 "aten._scaled_dot_product_cudnn_attention", "aten._scaled_dot_product_flash_attention_for_cpu",
                 "aten._scaled_dot_product_attention_math", "aten._flash_attention_forward",
                 "aten._efficient_attention_forward", "aten.einsum")


# Defaults per output dtype; an exercise may override any of them. fp16/bf16 allow for their 10/7 mantissa bits.
DEFAULT_TOLERANCE = {
    "float64": Tolerance(1e-9, 1e-9),
    "float32": Tolerance(1.3e-6, 1e-6),
    "float16": Tolerance(1e-3, 1e-3),
    "bfloat16": Tolerance(8e-3, 8e-3),
}


@dataclasses.dataclass(frozen=True)
class Perf:
    """A speed target relative to this device, checked on GPU only and reported apart from correctness.

    ``baseline``: ``"copy"`` (a torch copy moving the same bytes) or ``"reference"`` (the reference function).
    ``target``: the fraction of the baseline's speed to reach (0.8 = 80 %). ``params``: the case to time, usually
    larger than the correctness cases. ``bytes``: bytes the operation must move, from the arguments.
    ``make_inputs``: how the timed step's inputs are made from ``params``; a compared exercise's own by default, and
    required for a judged one (which has none).
    """

    baseline: str
    target: float
    params: dict
    bytes: Callable | None = None
    flops: Callable | None = None
    # How L2 is emptied before each repeat of the timed step and of its baseline (gpucourse.timing.bench): True
    # writes a buffer (do_bench's way), "read" reads one, which leaves L2 clean; short memory-bound kernels want
    # "read" (a write flush charges them for writing back someone else's lines; lesson 07, section 1).
    flush_l2: bool | str = True
    make_inputs: Callable | None = None


class JudgeTimeout(Exception):
    """Raised by an exercise's judge whose own deadline passed while the learner's code had not returned (e.g. ranks
    of a distributed exercise waiting for each other forever). The case's verdict is then "timeout", as when the
    grader's ``--timeout`` stops a submission, with the judge's message saying what probably hung."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseExercise:
    """What every exercise declares, compared (:class:`Exercise`) or judged (:class:`JudgedExercise`): the function
    the learner writes, the kind of kernel it must launch, its named cases, and what the checker and the grader read
    of either form."""

    id: str
    function: str  # the name the learner defines at top level
    signature: str  # shown in messages, e.g. "vector_add(x: Tensor, y: Tensor) -> Tensor"
    statement: str
    kind: str  # "triton", "cuda" or "none": which kind of kernel must be launched
    cases: tuple
    tolerance: dict = dataclasses.field(default_factory=dict)  # dtype name -> Tolerance, overriding the defaults
    reference_ops: tuple = ()  # aten op prefixes (e.g. "aten.add") whose use is flagged for a human look
    gpu_only: bool = False  # cases that cannot run in CPU mode (e.g. CUDA C++ kernels)
    perf: Perf | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"exercise {self.id!r}: kind must be one of {KINDS}, not {self.kind!r}")
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise ValueError(f"exercise {self.id!r}: case names must be unique, got {names}")

    def tolerance_for(self, dtype) -> Tolerance:
        """The tolerance for an output of ``dtype``; integer and bool outputs must match exactly."""
        name = dtypes.torch_name(dtype)
        if name in self.tolerance:
            return self.tolerance[name]
        return DEFAULT_TOLERANCE.get(name, Tolerance(0.0, 0.0))

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"exercise {self.id!r} has no case {name!r}; cases: {[c.name for c in self.cases]}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Exercise(BaseExercise):
    """A compared exercise: the learner's output is compared with a reference's. ``make_inputs(params, generator)
    -> tuple`` builds CPU arguments (tensors may be strided views; the checker moves them to the device and surrounds
    them with canary memory). ``reference(*args)`` computes the answer and is only ever run by the checker, never by
    the learner's code."""

    make_inputs: Callable
    reference: Callable
    determinism: str | None = "bitwise"  # run twice on the same inputs: "bitwise", "tolerance" or None
    forbidden_ops: tuple = ()  # aten op prefixes that fail a case when called on anything (e.g. attention, fp8 GEMMs)
    # Kinds "triton" and "cuda": torch compute ops on the inputs, or on anything derived from them (copies, views,
    # what a launched kernel wrote), fail the case; allocation, views, copies and fills are allowed (launches.py:
    # FREE_OPS). ``allowed_ops`` names the aten ops (e.g. "aten.sum") allowed on derived results, never on the inputs
    # themselves, e.g. a final sum of per-block partials; the exercise's statement says so.
    allowed_ops: tuple = ()
    max_launches: int | None = None  # per call, for exercises about launch counts (kind "triton" or "cuda")
    # Kind "cuda": (cpp, functions) as the workbook's build() declares them. The batch grader compiles that pybind11
    # module once (cuda_build.prepare_binding) and a submission declaring the same links it instead of compiling it.
    cuda_binding: tuple = ()
    # Inputs keep their place relative to a 16-byte (up to 256-byte) boundary: make_inputs may return views such as
    # x[1:] and the kernel then sees a pointer 4 bytes past one (guards.lead), in lists of tensors too. Off by default:
    # every input then starts on a fresh, aligned boundary.
    keep_alignment: bool = False
    tf32_possible: bool = False  # matmul-like: an error pattern near 1e-3 gets the TF32 hint
    # hints(params, args, expected, out) -> list of str: the exercise's own hints for a case whose output has wrong
    # values (params: the case's drawn parameters; args: the pristine inputs; out: the output, on the CPU), shown
    # before the checker's generic ones (check_verdict.evaluate). E.g. flash_attention: a ragged S needs masked loads.
    hints: Callable | None = None
    # max_extra_bytes(*args) -> bytes the call may allocate beyond its inputs: on a GPU its peak (measured with
    # torch.cuda.max_memory_allocated; the lower of the case's two calls, so an autotuner's first-call buffers pass),
    # in CPU mode the sum of what torch.empty/empty_like/new_empty handed out during the call.
    max_extra_bytes: Callable | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.determinism not in ("bitwise", "tolerance", None):
            raise ValueError(f"exercise {self.id!r}: determinism must be 'bitwise', 'tolerance' or None")

    @property
    def judge(self) -> None:
        """A compared exercise has no judge (:class:`JudgedExercise` has one)."""
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class JudgedExercise(BaseExercise):
    """An exercise whose answer is not an output to compare with a reference, e.g. a timer (is the number it returns
    close to a measured truth?) or a loop that must not synchronize. The checker calls ``judge(fn, case.params,
    seed)`` for each case, and the judge returns the list of problems it found (empty: the case passed), or raises
    :class:`JudgeTimeout`. Exceptions from the learner's ``fn`` propagate (the checker reports them as the
    learner's). A speed target (``perf``) gives its own ``make_inputs`` and the ``"copy"`` baseline.

    ``gpucourse.check`` runs the judge in-process; the batch grader runs it inside its isolated worker, where ``fn``
    returns only plain values (exact dicts, lists, numbers, strings, plain tensors) and everything the judge relies on
    is restored after each call into ``fn``. So a judge should build its inputs and its expected answer before calling
    ``fn``, import what it uses at module level (so it is loaded before the submission), and after the call look only
    at what ``fn`` returned and at objects it kept itself -- not call methods of objects ``fn`` was given. Objects
    the course holds that ``fn`` could have reached (the stand-in device queue, a detector's log) are made fresh or
    checked against the judge's own record, and where the course's package already computes the answer, the call
    runs inside ``grading.traps.trapped(<those functions>)``, so a submission that imports the instructor's solution
    gets an error naming it. A judge's case parameters travel to the grader's worker by pickling: plain data only.
    """

    judge: Callable  # judge(fn, params, seed) -> list of problems (or raises JudgeTimeout)

    def __post_init__(self):
        super().__post_init__()
        if self.perf is not None and (self.perf.make_inputs is None or self.perf.baseline != "copy"):
            raise ValueError(f"exercise {self.id!r}: a judged exercise's speed target needs its own make_inputs and "
                             f"the 'copy' baseline (there is no reference to time)")


def _modules() -> dict:
    """exercise id -> module name, from every lesson's ``exercises`` package (ids are unique across lessons)."""
    from .. import lessons

    found = {}
    for pkg in lessons.submodules("exercises"):
        for m in pkgutil.iter_modules(pkg.__path__):
            if m.name.startswith("_"):
                continue
            if m.name in found:
                raise LookupError(f"exercise {m.name!r} is defined twice: {found[m.name]} and {pkg.__name__}")
            found[m.name] = f"{pkg.__name__}.{m.name}"
    return found


def all_ids() -> list:
    """Ids of every exercise of every lesson, sorted."""
    return sorted(_modules())


def get(exercise_id: str) -> BaseExercise:
    """The exercise with this id; KeyError naming the known ids otherwise."""
    modules = _modules()
    if exercise_id not in modules:
        raise KeyError(f"unknown exercise {exercise_id!r}; known exercises: {', '.join(sorted(modules))}")
    module = importlib.import_module(modules[exercise_id])
    ex = getattr(module, "EXERCISE", None)
    if not isinstance(ex, BaseExercise) or ex.id != exercise_id:
        raise KeyError(f"module {module.__name__} must define EXERCISE with id {exercise_id!r}")
    return ex
