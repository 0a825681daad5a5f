"""The verdict on one case of a compared exercise, computed from the pristine inputs, the reference's answer and what
the learner's call did (never by the learner's code path): the output's form and values (compare.py), the inputs and
their canaries afterwards, determinism, launches and the torch ops used, with hints for the likely cause."""
from __future__ import annotations

import dataclasses

import torch

from .. import device as _device
from . import compare, guards, launches
from .check_call import forbidden_problem


@dataclasses.dataclass
class CaseResult:
    """One case's verdict, of a compared exercise (:func:`evaluate`) or a judged one (checker.py): its problems, the
    hints for their likely cause, and where a wrong output is wrong."""

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


MISSING = object()  # an outcome without "past_end" (one built by hand): read the band from the output


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
        past = outcome.get("past_end", MISSING)  # run_case reads it beside the output; another outcome may not
        where = compare.where_map(out.shape, codes, compare.past_end_writes(out) if past is MISSING else past)
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
