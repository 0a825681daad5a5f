"""``check(exercise_id, fn)``: run a learner's function on every named case of an exercise and say where it is wrong.

The pieces here are shared with the batch grader: :func:`make_case` (inputs from a seed, inside canary memory, and
the reference answer), :func:`run_call` (the learner's call with poisoned allocations, launch counting and op
recording; the grader runs it inside the isolated worker), :func:`evaluate` (the verdict, computed from the
reference, never by the learner's code path) and, for judged exercises, :func:`judge_case` (the grader's worker runs
it on a sealed function, see judging.py). In a notebook the learner's code shares this process, so ``check`` is
feedback, not proof: the batch grader (``gpucourse grade``) is what an instructor trusts.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import sys
import time
import traceback
import warnings

import torch

from .. import device as _device
from .. import plots
from .exercise import JudgeTimeout, drawn, has_draws, resolve
from .exercise import get as _get_exercise
from . import compare, guards, launches

_HERE = os.path.dirname(os.path.abspath(__file__))


class CheckerError(RuntimeError):
    """A bug in the checker or the exercise spec, never the learner's fault."""


# What check, its CPU mode for CUDA exercises (cuda_check.py) and the batch grader say about a stub that still raises
# NotImplementedError; each prefixes the function's name.
NOT_IMPLEMENTED = ("raises NotImplementedError (not implemented yet): replace the `# YOUR CODE HERE` stub with your "
                   "code")


@dataclasses.dataclass
class CaseResult:
    name: str
    passed: bool
    problems: list
    hints: list = dataclasses.field(default_factory=list)
    where: compare.WhereMap | None = None  # where a failed output is wrong (drawing.py draws it), None if unknown

    def line(self) -> str:
        if self.passed:
            return f"  PASS  {self.name}"
        body = "\n".join(f"        - {p}" for p in self.problems + [f"hint: {h}" for h in self.hints])
        return f"  FAIL  {self.name}\n{body}"


@dataclasses.dataclass
class CheckResult:
    """What ``check`` found. ``status``: passed, failed, not implemented, error (the learner's code raised), timeout (a
    judge's deadline passed: :class:`exercise.JudgeTimeout`), or needs gpu (a CUDA exercise in CPU mode: its kernels
    were compiled, not run)."""

    exercise: str
    status: str
    cases: list
    message: str = ""
    perf: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def report(self) -> str:
        n_ok = sum(c.passed for c in self.cases)
        head = {"passed": f"{self.exercise}: all {len(self.cases)} cases passed",
                "failed": f"{self.exercise}: {n_ok} of {len(self.cases)} cases passed",
                "not implemented": f"{self.exercise}: not implemented yet",
                "error": f"{self.exercise}: your function raised an exception",
                "timeout": f"{self.exercise}: your function did not return in time",
                "needs gpu": f"{self.exercise}: compile-checked only; running it needs a CUDA GPU"}[self.status]
        lines = [head] + [c.line() for c in self.cases]
        if self.message:
            lines.append(self.message)
        if self.perf:
            lines.append(self.perf)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<check {self.exercise}: {self.status}>"


# ---------------------------------------------------------------------------------------------------------------------
# Shared with the batch grader.


def new_seed() -> int:
    """A fresh secret seed per check: from the OS, never derived from anything the learner's code can set."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def case_seed(seed: int, index: int) -> int:
    """The seed of case number ``index`` of a check whose secret seed is ``seed``."""
    return (seed + 7919 * index) % (2**63 - 1)


def drawn_case(case, seed: int, index: int):
    """``case`` with the sizes its parameters draw (:class:`exercise.Draw`) drawn for this run: the same for the same
    secret seed, fresh for every run."""
    if not has_draws(case.params):
        return case
    gen = torch.Generator().manual_seed(case_seed(seed, index) ^ 0x5DEECE66D)
    return dataclasses.replace(case, params=resolve(case.params, gen))


def drawn_note(ex, case) -> str:
    """"sizes drawn for this run: n=1021" for a case that draws sizes (``case``: the drawn one), else ""."""
    try:
        spec = ex.case(case.name)
    except KeyError:
        return ""
    what = drawn(spec.params, case.params)
    return f"sizes drawn for this run: {what}" if what else ""


def make_case(ex, case, seed: int, index: int) -> tuple:
    """(arguments as guarded CPU buffers, expected output) for one case. The reference runs on private copies."""
    case = drawn_case(case, seed, index)
    gen = torch.Generator().manual_seed(case_seed(seed, index))
    raw = ex.make_inputs(case.params, gen)
    keep = getattr(ex, "keep_alignment", False)
    args = [guards.guarded(a, keep_alignment=keep) if isinstance(a, torch.Tensor) else
            ({"value": a, "keep_alignment": True} if keep else {"value": a}) for a in raw]
    private = [guards.view_of(a).clone() if "buffer" in a else a["value"] for a in args]
    expected = ex.reference(*private)
    return args, expected


def _clone_value(value, keep_alignment: bool = False):
    """A list/tuple argument (e.g. sum_many's list of tensors) with each tensor in it cloned (``keep_alignment``: at
    the same offset from an aligned boundary, guards.placed_like)."""
    copy = guards.placed_like if keep_alignment else torch.Tensor.clone
    if isinstance(value, (list, tuple)):
        return type(value)(copy(v) if isinstance(v, torch.Tensor) else v for v in value)
    return value


def clone_args(args: list) -> list:
    """Independent copies of ``args`` (a call that modifies its inputs in place cannot reach the copies)."""
    return [dict(a, buffer=a["buffer"].clone()) if "buffer" in a else
            dict(a, value=_clone_value(a["value"], a.get("keep_alignment") is True)) for a in args]


def _value_to(value, dev, keep_alignment: bool = False):
    """A list/tuple of tensors (e.g. sum_many's argument) is copied to ``dev`` element by element (``keep_alignment``:
    each at the same offset from an aligned boundary as it had, guards.placed_like)."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        if keep_alignment:
            return type(value)(guards.placed_like(v, dev) for v in value)
        return type(value)(v.to(dev, copy=True) for v in value)
    return value


def to_device(args: list, dev) -> list:
    """Copies on ``dev`` (always copies, so the pristine buffers stay untouched by the learner's call)."""
    return [dict(a, buffer=a["buffer"].to(dev, copy=True)) if "buffer" in a else
            dict(a, value=_value_to(a["value"], dev, a.get("keep_alignment") is True)) for a in args]


def call_values(args: list) -> list:
    return [guards.view_of(a) if "buffer" in a else a["value"] for a in args]


def judge_case(judge, fn, params: dict, seed: int) -> list:
    """The problems an exercise's judge (``Exercise.judge``) finds with ``fn`` on one case (empty: it passed).
    Exceptions from ``fn`` propagate. ``check`` calls it in-process; the batch grader's worker calls it on a sealed
    ``fn`` (judging.py)."""
    return [str(p) for p in judge(fn, params, seed)]


def run_call(ex, fn, args: list, skip_launches: bool = False) -> dict:
    """Call ``fn`` once on ``args`` (guarded buffers on the device): poisoned allocations, launches and ops counted.
    In a Triton or CUDA exercise the compute ops used on the inputs (or on data derived from them) are counted too
    (``uses``, see launches.py). ``skip_launches``: Triton launches are counted but not run.

    Exceptions from ``fn`` propagate to the caller (which shows them as the learner's traceback).
    """
    count_cuda = ex.kind == "cuda" and _device.on_gpu()
    watch_memory = getattr(ex, "max_extra_bytes", None) is not None
    if watch_memory and _device.on_gpu():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    values = call_values(args)
    uses, course = collections.Counter(), collections.Counter()
    inputs = values if ex.kind in ("triton", "cuda") else None
    skip = launches.skipping() if skip_launches else contextlib.nullcontext()
    with guards.poisoned_allocations() as records, launches.counting_triton(course) as triton_launches, \
            launches.recording_ops(inputs, uses, getattr(ex, "allowed_ops", ()), ex.kind == "cuda") as ops, skip, \
            warnings.catch_warnings():
        # Triton's interpreter evaluates every lane in NumPy, the masked-off ones too (exp of a -inf padding lane,
        # say): its overflow warnings are not the learner's, and a passing check must not print them.
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
        try:
            if count_cuda:
                with launches.counting_cuda() as cuda_launches:
                    out = fn(*values)
            else:
                cuda_launches = {}
                out = fn(*values)
        except Exception as exc:  # a forbidden op called before the raise is the verdict, not the raise (see below)
            _note_forbidden(exc, launches.reference_calls(dict(ops), getattr(ex, "forbidden_ops", ()) or ()))
            raise
        if _device.on_gpu():
            torch.cuda.synchronize()
    extra = None
    if watch_memory:  # on a GPU the allocator's peak; in CPU mode what torch.empty* handed out during the call
        extra = torch.cuda.max_memory_allocated() - base if _device.on_gpu() else \
            sum(buf.numel() * buf.element_size() for buf, _ in records)
    return {"out": out, "triton_launches": dict(triton_launches), "cuda_launches": dict(cuda_launches),
            "ops": dict(ops), "uses": dict(uses), "course_launches": dict(course),
            "overruns": guards.overruns(records), "extra_bytes": extra}


def forbidden_problem(calls: list) -> str:
    """The problem when the learner's function called ``calls``, ops its exercise forbids."""
    return (f"calls {', '.join(calls)}: this exercise asks for your own kernel to compute the answer, not this torch "
            f"op (a kernel launched beside it does not count)")


_FORBIDDEN_ATTR = "_gpucourse_forbidden_calls"


def _note_forbidden(exc: BaseException, calls: list) -> None:
    """Remember on ``exc`` the forbidden ops called before it was raised: a cheat that hands the work to cuBLAS
    and dies on a shape cuBLAS refuses (torch._scaled_mm wants dimensions divisible by 16) is told about the cheat,
    as it is on every shape cuBLAS takes, not only about the crash."""
    if calls:
        try:
            setattr(exc, _FORBIDDEN_ATTR, list(calls))
        except Exception:  # noqa: BLE001 - an exception type with __slots__: the raise alone is reported
            pass


def forbidden_before_raise(exc: BaseException) -> list:
    """The forbidden ops the learner's function called before raising ``exc`` (see :func:`run_call`)."""
    try:  # the exception is the learner's object: its attributes may be anything
        calls = BaseException.__getattribute__(exc, "__dict__").get(_FORBIDDEN_ATTR)
        return [c for c in calls if type(c) is str] if type(calls) is list else []
    except Exception:  # noqa: BLE001
        return []


def raised_after_forbidden(calls: list, raised: str) -> str:
    """A failed case's problem: forbidden ops called, then an exception (``raised``, its one-line description)."""
    return f"{forbidden_problem(calls)}; it then raised {raised}"


def memory_problem(ex, args: list, calls: list) -> list:
    """The problem when every call in ``calls`` allocated more than ``ex.max_extra_bytes`` allows: on a GPU the
    allocator's peak beyond what was allocated before the call; in CPU mode only what torch.empty, empty_like and
    new_empty handed out (the allocations the checker poisons), a partial view."""
    used = [c.get("extra_bytes") for c in calls if c.get("extra_bytes") is not None]
    if getattr(ex, "max_extra_bytes", None) is None or not used:
        return []
    limit = int(ex.max_extra_bytes(*call_values(args)))
    if min(used) <= limit:
        return []
    where = "GPU memory" if _device.on_gpu() else "memory (torch.empty*)"
    return [f"allocated {min(used) / 2**20:,.2f} MiB of {where} beyond its inputs during the call (at most "
            f"{limit / 2**20:,.2f} MiB allowed): something as large as a score matrix was materialised; keep "
            f"the work on chip, one block at a time"]


def _storage(t) -> int | None:
    """Where a dense tensor's memory starts (its storage), or None for what has no plain storage or no elements."""
    try:
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.numel() == 0 or t.device.type == "meta":
            return None
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def aliasing(args: list, out, out2) -> list:
    """Problems with *where* the output lives: in an input's memory (``return x``, or a view of it), or in the same
    memory on both calls (a buffer kept between calls: the second call overwrites what the first returned, and a
    race can no longer show as two different answers)."""
    problems, where = [], _storage(out)
    if where is not None:
        for i, a in enumerate(args):
            tensors = [a["buffer"]] if "buffer" in a else \
                [v for v in (a["value"] if isinstance(a["value"], (list, tuple)) else [a["value"]])
                 if isinstance(v, torch.Tensor)]
            if any(_storage(t) == where for t in tensors):
                view = guards.view_of(a) if "buffer" in a else None
                if view is not None and (out.data_ptr(), out.shape, out.stride()) == \
                        (view.data_ptr(), view.shape, view.stride()):
                    problems.append(f"your output is your input: the tensor returned is argument {i + 1} itself; "
                                    f"compute the result into a new tensor")
                else:
                    problems.append(f"your output shares memory with argument {i + 1} (a view of it, or written "
                                    f"into it): compute the result into a new tensor")
                break
    if where is not None and _storage(out2) == where:
        problems.append("both calls returned the same memory: a buffer kept between calls is overwritten by the next "
                        "call (and hides a race); allocate the output inside the function, on every call")
    return problems


def run_case(ex, fn, args: list) -> dict:
    """Everything the verdict needs from the learner's side for one case: output, a second output on a fresh copy
    of the same inputs (determinism), the input buffers afterwards (canaries), launches and ops."""
    second = clone_args(args) if ex.determinism else None
    first = run_call(ex, fn, args)
    outcome = dict(first, buffers_after=[a.get("buffer") for a in args], out2=None)
    calls = [first]
    if second is not None:
        calls.append(run_call(ex, fn, second))
        outcome["out2"] = calls[-1]["out"]
    # Problems found during the calls travel with the overruns (the batch grader's worker forwards that list).
    outcome["overruns"] = list(outcome["overruns"]) + memory_problem(ex, args, calls)
    outcome["aliasing"] = aliasing(args, outcome["out"], outcome["out2"])
    for c in calls[1:]:  # what either call used, launched or called (a forbidden op on the second call only too)
        for key in ("uses", "course_launches", "ops"):
            for k, v in c[key].items():
                outcome[key][k] = max(outcome[key].get(k, 0), v)
    outcome["noop_out"] = None
    if ex.kind == "triton":  # last: an autotuner has cached its choice on the real calls
        try:
            outcome["noop_out"] = run_call(ex, fn, clone_args(args), skip_launches=True)["out"]
        except Exception:  # noqa: BLE001 - it needs what its kernels compute: as it should
            pass
    return outcome


def evaluate(ex, case, args: list, expected, outcome: dict, device_type: str) -> CaseResult:
    """The verdict for one case, from the pristine inputs, the reference output and what the learner's call did."""
    # Writes out of bounds lead: they are the likely cause of wrong values (a row's spill into the next).
    overruns = list(outcome.get("overruns") or [])
    problems, hints, codes = list(outcome.get("aliasing") or []) + overruns, [], None
    out = outcome["out"]
    is_tensor_answer = isinstance(expected, torch.Tensor)
    if is_tensor_answer:
        meta = compare.check_meta(expected, out, device_type, outcome.get("out_device"))
        problems += meta
        if isinstance(out, torch.Tensor) and compare.dense_problem(out) is None and \
                tuple(out.shape) == tuple(expected.shape):
            tol = ex.tolerance_for(expected.dtype)
            m = compare.compare_values(expected, out, tol.rtol, tol.atol_scale, hint_tf32=ex.tf32_possible,
                                       zero_guess=not overruns)
            if not m.ok:
                problems += m.problems
                hints += value_hints(ex, case, args, expected, out) + m.hints
                codes = getattr(m, "codes", None)
    else:
        tol = ex.tolerance_for(torch.float64)
        m = compare.compare_scalar(expected, out, tol.rtol, tol.atol_scale)
        problems += m.problems

    for i, (a, after) in enumerate(zip(args, outcome.get("buffers_after") or [])):
        if "buffer" not in a or after is None:
            continue
        name = f"argument {i + 1}"
        after = after.detach().cpu()
        if after.shape != a["buffer"].shape or after.dtype != a["buffer"].dtype:
            problems.append(f"{name}'s memory was replaced (resized or re-typed)")
            continue
        before_v, after_v = guards.view_of(a), guards.view_of(a, after)
        changed = ~(guards.bits(before_v) == guards.bits(after_v)) if guards.supported(after.dtype) \
            else ~(before_v == after_v)
        if bool(changed.any()):
            problems.insert(0, f"modified its input ({name}): {int(changed.sum())} element(s) changed; "
                               f"write the result to a new tensor")  # the cause of what else is wrong, first
        damage = guards.canary_damage(a, after)
        if damage:
            last = guards.span(a["shape"], a["stride"]) - 1
            where = ("before its first element" if min(damage) < 0 else
                     "after its last element" if max(damage) > last else "in the gaps between its strided elements")
            problems.append(f"out-of-bounds write: {len(damage)} element(s) of guard memory around {name} were "
                            f"overwritten ({where}, at offsets {damage[:5]} relative to its first element); "
                            f"mask your loads/stores with offsets < n")

    out2 = outcome.get("out2")
    if ex.determinism and isinstance(out, torch.Tensor) and isinstance(out2, torch.Tensor) and not problems:
        same_shape = out2.shape == out.shape and out2.dtype == out.dtype
        if ex.determinism == "bitwise":
            same = same_shape and bool(torch.equal(out.detach().cpu(), out2.detach().cpu()) or
                                       (guards.supported(out.dtype) and torch.equal(
                                           guards.bits(out.detach().cpu().contiguous()),
                                           guards.bits(out2.detach().cpu().contiguous()))))
        else:
            tol = ex.tolerance_for(out.dtype)
            same = same_shape and compare.compare_values(out, out2, tol.rtol, tol.atol_scale).ok
        if not same:
            problems.append("nondeterministic: two calls on the same inputs gave different outputs (a race?)")

    n_launch = sum((outcome.get("triton_launches") if ex.kind == "triton" else outcome.get("cuda_launches") or {})
                   .values()) if ex.kind != "none" else 0
    course = course_problems(outcome)
    if course:  # the instructor's kernel answered: that is the cause of whatever else is wrong, so it leads
        problems[:0] = course
    elif ex.kind == "triton" and n_launch == 0:
        problems.append("no Triton kernel was launched: this exercise asks for a @triton.jit kernel launched as "
                        "kernel[grid](...); torch operations such as x + y do not count")
    if ex.kind == "cuda" and _device.on_gpu() and n_launch == 0 and not course:
        problems.append("no CUDA kernel was launched: this exercise asks for your own CUDA kernel")
    forbidden = launches.reference_calls(outcome.get("ops") or {}, ex.forbidden_ops)
    if forbidden:
        problems.append(forbidden_problem(forbidden))
    problems += use_problems(ex, outcome)
    if is_tensor_answer and n_launch:  # with no launch at all, "no Triton kernel was launched" says it
        problems += noop_problem(ex, expected, out, outcome.get("noop_out"))
    if ex.max_launches is not None and n_launch > ex.max_launches:
        problems.append(f"launched {n_launch} kernels per call; at most {ex.max_launches} allowed")
    where = None
    if problems and isinstance(expected, torch.Tensor) and isinstance(out, torch.Tensor) and \
            compare.dense_problem(out) is None and tuple(out.shape) == tuple(expected.shape):
        where = compare.where_map(out.shape, codes, compare.past_end_writes(out))
    return CaseResult(name=case.name, passed=not problems, problems=problems, hints=hints, where=where)


def value_hints(ex, case, args: list, expected, out) -> list:
    """Hints for a case whose output has wrong values, before compare's own (precision): the exercise's
    (``Exercise.hints``), then, where an input of the case is not contiguous, :func:`strided_hint`."""
    hints = []
    if ex.hints is not None:
        try:
            values = [guards.view_of(a) if "buffer" in a else a["value"] for a in args]
            hints += [str(h) for h in ex.hints(case.params, values, expected, out.detach().cpu()) or ()]
        except Exception as exc:  # a hint must never cost the verdict: say it is the spec's bug
            hints.append(f"(internal: the exercise's hints failed: {exc!r})")
    strided = strided_hint(args)
    if strided:
        hints.append(strided)
    return hints


def strided_hint(args: list) -> str:
    """The hint for a wrong output when some inputs of the case are not contiguous (a slice, every other row, a
    transposed view): a kernel that indexes them as if they were reads the gaps between their elements (the guard
    values there are NaN). "" when every input is contiguous."""
    shown = []
    for i, a in enumerate(args):
        if "buffer" in a and not guards.view_of(a).is_contiguous():
            shown.append(f"argument {i + 1} has shape {tuple(a['shape'])} and strides {tuple(a['stride'])}")
    if not shown:
        return ""
    more = f" (and {len(shown) - 2} more)" if len(shown) > 2 else ""
    return (f"the inputs of this case are not contiguous, so your kernel must use their strides "
            f"({'; '.join(shown[:2])}{more}): an element's offset is its index times its stride, not its index, and "
            f"other memory lies between the elements. Pass the strides (x.stride(0), ...) and load at index * "
            f"stride, or copy the inputs with .contiguous() first")


# What a use of a torch op on the inputs means, for the ops a learner is likely to reach for.
_USE_HINTS = {"aten._local_scalar_dense": ".item()/float()/int() reads values on the host",
              "aten._to_copy (to another device)": "a copy to another device (.cpu(), .to(...)) to compute there"}


def use_problems(ex, outcome: dict) -> list:
    """The problems with the torch ops a Triton or CUDA exercise's call used on its inputs (or on data derived from
    them); launches of the course's own kernels are :func:`course_problems`."""
    problems = []
    uses = sorted(outcome.get("uses") or {})
    if uses and ex.kind in ("triton", "cuda"):
        named = ", ".join(f"{u} ({_USE_HINTS[u]})" if u in _USE_HINTS else u for u in uses[:6])
        more = f" and {len(uses) - 6} more" if len(uses) > 6 else ""
        allowed = (f"; only {', '.join(ex.allowed_ops)} may be used, on your kernels' results" if ex.allowed_ops
                   else "")
        problems.append(f"uses torch to compute on the inputs or on what was derived from them: {named}{more}. "
                        f"Your own kernel must compute the answer (allocation, views, copies and fills are "
                        f"fine{allowed})")
    return problems


def course_problems(outcome: dict) -> list:
    """The problem when the call launched the course's own kernels (the instructor's, from the gpucourse package):
    its answer is the instructor's, whether or not a kernel of the learner's own was launched beside them."""
    course = sorted(outcome.get("course_launches") or {})
    if not course:
        return []
    return [f"used the course's own code: launched the course's kernel{'s' if len(course) > 1 else ''} "
            f"{', '.join(course[:4])} (the instructor's, defined in the gpucourse package), not a kernel of your own: "
            f"write and launch your own"]


# Of the elements a zero answer gets wrong, the share that may come out right with every launch skipped (a
# torch.full/ones initialisation agreeing by chance); more than that was not computed by a kernel.
NOOP_SHARE = 0.25


def noop_problem(ex, expected, out, noop) -> list:
    """The problem when the output of the call made with every Triton launch skipped (``noop``: what a launch that
    did nothing leaves) is the answer: the kernels did not compute it. Counted over the elements that a zero answer
    would get wrong, so an output allocated with torch.zeros, or a little agreement by chance, is not it."""
    if ex.kind != "triton" or not isinstance(noop, torch.Tensor) or not isinstance(out, torch.Tensor) or \
            compare.dense_problem(noop) is not None or tuple(noop.shape) != tuple(expected.shape) or \
            noop.dtype != expected.dtype:
        return []
    tol = ex.tolerance_for(expected.dtype)
    e, n = expected.detach().cpu().to(torch.float64), noop.detach().cpu().to(torch.float64)
    atol = tol.atol_scale * float(e.abs().max()) if e.numel() else 0.0
    limit = atol + tol.rtol * e.abs()
    nonzero = e.abs() > limit  # where a zero would be wrong
    if not bool(nonzero.any()):
        return []
    right = ((n - e).abs() <= limit) & nonzero
    share = float(right.sum()) / float(nonzero.sum())
    if share <= NOOP_SHARE:
        return []
    return [f"the output does not come from your kernels: with every Triton launch skipped (a launch that does "
            f"nothing), your function still returned {share:.0%} of the answer's elements right. It was computed "
            f"outside your kernel (torch, NumPy, Python): compute it in the kernel you launch"]


def learner_traceback(exc: BaseException) -> str:
    """The exception as the learner's own traceback: the checker's frames are left out."""
    tb = exc.__traceback__
    frames = [f for f in traceback.extract_tb(tb) if not os.path.abspath(f.filename).startswith(_HERE)]
    text = "Traceback (most recent call last):\n" if frames else ""
    text += "".join(traceback.format_list(frames))
    text += "".join(traceback.format_exception_only(type(exc), exc))
    return text


def first_problem(text: str) -> str:
    """The first line of ``text`` (a failed check's detail, an exception's message), with the next non-blank line
    when it ends in ":" (a heading, as "8 synchronization(s) inside train_fast:" or CudaCompileError's)."""
    lines = text.splitlines() or [""]
    rest = next((ln.strip() for ln in lines[1:] if ln.strip()), "") if lines[0].rstrip().endswith(":") else ""
    return lines[0].rstrip() + (" " + rest if rest else "")


def exception_line(traceback_text: str, exc_type: str = "") -> str:
    """The line of a traceback that says what was raised ("IndexError: index 5 is out of bounds"), not its last
    line: torch's CUDA errors end with advice ("Compile with `TORCH_USE_CUDA_DSA` ...") and a compiler error with
    its summary. A heading ("... failed:") gets its next line, as in :func:`first_problem`."""
    lines = [ln.rstrip() for ln in traceback_text.strip().splitlines()]
    names = {n for n in (exc_type, exc_type.rsplit(".", 1)[-1]) if n}
    for i in range(len(lines) - 1, -1, -1):
        head = lines[i].split(":", 1)[0].strip()
        if head.rsplit(".", 1)[-1] in names or (not names and head.endswith(("Error", "Exception", "Exit", "Interrupt"))):
            return first_problem("\n".join(lines[i:])).strip()
    return lines[-1].strip() if lines else ""


def is_not_implemented(exc: BaseException) -> bool:
    return isinstance(exc, NotImplementedError)


# ---------------------------------------------------------------------------------------------------------------------
# Speed (GPU only), reported apart from correctness.


def draw_perf(ex) -> list | None:
    """The timed step's inputs, drawn on the CPU (2^28 floats take seconds there); None in CPU mode or without a
    target. The grader asks for this holding no GPU lock: it touches no GPU."""
    if ex.perf is None or not _device.on_gpu():
        return None
    gen = torch.Generator().manual_seed(new_seed())
    return list(ex.make_inputs(ex.perf.params, gen))


def prepare_perf(ex, fn=None, drawn: list | None = None) -> dict | None:
    """The timed step's inputs (``drawn`` by :func:`draw_perf`, or drawn now) moved to the GPU, and ``fn`` called once
    on them (its compiles and first-call allocations happen here); None in CPU mode or without a target. The grader
    asks for this under the GPU's *shared* lock and for :func:`measure_perf` under the exclusive one, so none of this
    stops every other job's cases while a timing waits."""
    if ex.perf is None or not _device.on_gpu():
        return None
    dev = _device.torch_device()
    args = [a.to(dev) if isinstance(a, torch.Tensor) else _value_to(a, dev)
            for a in (drawn if drawn is not None else draw_perf(ex))]
    nbytes = ex.perf.bytes(*args) if ex.perf.bytes else None
    nflops, dtype = None, None
    if ex.perf.flops:  # declared flops are held to the tensor-core peak of the inputs' dtype (above it: suspicious)
        nflops = ex.perf.flops(*args)
        dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)
        if dtype == torch.float32 and ex.tf32_possible:
            dtype = "tf32"
    if fn is not None:
        fn(*args)
        torch.cuda.synchronize()
    return {"args": args, "bytes": nbytes, "flops": nflops, "dtype": dtype}


def measure_perf(ex, fn, prepared: dict | None = None) -> dict | None:
    """Time ``fn`` against the spec's baseline on this GPU (on ``prepared``'s inputs, from :func:`prepare_perf`, or on
    inputs drawn now); None in CPU mode or without a target."""
    if ex.perf is None or not _device.on_gpu():
        return None
    from .. import timing

    prepared = prepared or prepare_perf(ex)
    args, nbytes, nflops, dtype = prepared["args"], prepared["bytes"], prepared["flops"], prepared["dtype"]
    flush = ex.perf.flush_l2
    mine = timing.bench(fn, *args, bytes=nbytes, flops=nflops, dtype=dtype, name=ex.function, flush_l2=flush)
    if ex.perf.baseline == "copy":
        # A torch copy that reads and writes nbytes in all, like the kernel (copy_gbps counts read + written).
        base_gbps = timing.copy_gbps(max(1, int(nbytes or 0) // 2), flush_l2=flush)
        ratio = (mine.gbps or 0) / (base_gbps or float("inf"))
        what = f"{mine.gbps:,.0f} GB/s = {ratio:.2f}x a torch copy of the same bytes ({base_gbps:,.0f} GB/s)"
    else:
        base = timing.bench(ex.reference, *args, bytes=nbytes, name="reference", flush_l2=flush)
        ratio = base.median_ms / mine.median_ms
        what = f"{ratio:.2f}x the speed of the reference ({mine.median_ms:.3f} ms vs {base.median_ms:.3f} ms)"
    pct = mine.pct_of_peak_bw if mine.pct_of_peak_bw is not None else mine.pct_of_peak_flops
    return {"ratio": ratio, "target": ex.perf.target, "met": ratio >= ex.perf.target,
            "suspicious": mine.suspicious, "text": f"{what}; target >= {ex.perf.target:g}x",
            "warnings": list(mine.warnings),
            # the spread of the submission's own times and its share of the ceiling: the leaderboard's ties
            "ms": mine.median_ms, "q25_ms": mine.q25_ms, "q75_ms": mine.q75_ms, "pct_of_peak": pct}


# ---------------------------------------------------------------------------------------------------------------------
# The notebook entry point.


def _raised(ex, case, exc) -> tuple:
    """(status, message) when the learner's code raised on ``case``."""
    if is_not_implemented(exc):
        return "not implemented", f"{ex.function} {NOT_IMPLEMENTED}, then run this cell again."
    return "error", f"on case {case.name!r}:\n{learner_traceback(exc)}"


def check(exercise_id: str, fn, *, quiet: bool = False, plot: bool | None = None) -> CheckResult:
    """Check ``fn`` against exercise ``exercise_id`` on fresh random inputs and print where it is wrong.

    Returns a CheckResult (``.passed``, ``.status``, ``.cases``). Never raises because of the learner's code: an
    exception from ``fn`` is shown as their traceback, and ``NotImplementedError`` as "not implemented yet".
    """
    ex = _get_exercise(exercise_id)
    if not callable(fn):
        raise TypeError(f"check({exercise_id!r}, fn): fn must be your function {ex.signature}, "
                        f"got {type(fn).__name__}")
    if ex.gpu_only and not _device.on_gpu() and ex.kind == "cuda":
        from . import cuda_check

        first = make_case(ex, ex.cases[0], new_seed(), 0)[0] if ex.cases else []
        status, message = cuda_check.cpu_check(ex, fn, call_values(first), learner_traceback)
        result = CheckResult(ex.id, status, [], message=message)
        if not quiet:
            print(result.report())
        return result
    if ex.gpu_only and not _device.on_gpu():
        result = CheckResult(ex.id, "not implemented", [], message="this exercise needs a CUDA GPU: skipped in "
                                                                  "CPU mode")
        if not quiet:
            print(result.message)
        return result
    seed = new_seed()
    dev = _device.torch_device()
    results, status, message = [], "passed", ""
    for index, case in enumerate(ex.cases):
        if ex.judge is not None:  # the spec judges the function itself (see Exercise.judge)
            try:
                problems = judge_case(ex.judge, fn, case.params, case_seed(seed, index))
            except JudgeTimeout as exc:
                results.append(CaseResult(name=case.name, passed=False, problems=[str(exc)]))
                status = "timeout"
                break
            except Exception as exc:
                status, message = _raised(ex, case, exc)
                break
            results.append(CaseResult(name=case.name, passed=not problems, problems=problems))
            if problems:
                status = "failed"
            continue
        case = drawn_case(case, seed, index)
        try:
            args, expected = make_case(ex, case, seed, index)
            dev_args = to_device(args, dev)
        except Exception as exc:  # the learner's code has not run yet: this is the checker's bug
            raise CheckerError(f"internal checker error preparing case {case.name!r} of {ex.id!r} (not your "
                               f"fault; please report it): {exc!r}") from exc
        t0 = time.perf_counter()
        try:
            outcome = run_case(ex, fn, dev_args)
        except Exception as exc:  # the learner's code raised
            forbidden = forbidden_before_raise(exc)
            if forbidden:  # the cheat is the verdict; the next cases are checked as usual
                raised = exception_line(learner_traceback(exc), type(exc).__name__)
                results.append(CaseResult(name=case.name, passed=False,
                                          problems=[raised_after_forbidden(forbidden, raised)]))
                status = "failed"
                continue
            status, message = _raised(ex, case, exc)
            break
        outcome["seconds"] = time.perf_counter() - t0
        try:
            verdict = evaluate(ex, case, args, expected, outcome, dev.type)
        except Exception as exc:
            raise CheckerError(f"internal checker error evaluating case {case.name!r} of {ex.id!r} (not your "
                               f"fault; please report it): {exc!r}") from exc
        if not verdict.passed and drawn_note(ex, case):
            verdict.problems.append(drawn_note(ex, case))
        results.append(verdict)
        if not verdict.passed:
            status = "failed"
    result = CheckResult(ex.id, status, results, message=message)
    if status == "passed" and ex.perf is not None:
        if _device.on_gpu():
            try:
                p = measure_perf(ex, fn)
                result.perf = (f"speed (GPU, separate from correctness): {p['text']}: "
                               f"{'target met' if p['met'] else 'below target'}"
                               + ("\n  ! the timing is above this GPU's peak: a measurement error"
                                  if p["suspicious"] else ""))
            except Exception as exc:
                result.perf = (f"speed: could not be measured "
                               f"({exception_line(learner_traceback(exc), type(exc).__name__)})")
        else:
            result.perf = "speed: measured on a GPU only (CPU mode checks correctness)."
    if not quiet:
        print(result.report())
        if plot is not False and (plot or plots.in_notebook()):
            from . import drawing

            mapped = [c for c in results if not c.passed and c.where is not None]
            if len(mapped) > drawing.MAX_FIGURES:
                print(f"(drawn below: {drawing.MAX_FIGURES} of the {len(mapped)} failed cases, those whose "
                      f"pictures show the most)")
            drawing.show([drawing.draw(c.where, ex.id, c.name) for c in drawing.pick(mapped)])
    return result
