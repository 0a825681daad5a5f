"""``check(exercise_id, fn)``: run a learner's function on every named case of an exercise and say where it is wrong.

A case goes through four steps, each its own module, shared with the batch grader:

* check_cases.py: the inputs, from a secret seed, inside canary memory, with the reference's answer
  (:func:`make_case`), and their copies on the device (:func:`to_device`);
* check_call.py: the learner's call with poisoned allocations, launch counting and op recording (:func:`run_call`;
  the grader runs it inside the isolated worker), a case's calls (:func:`run_case`), or for a judged exercise its
  judge (:func:`judge_case`; the grader's worker runs it on a sealed function, see judging.py);
* check_verdict.py: the verdict, computed from the reference, never by the learner's code path (:func:`evaluate`);
* check_perf.py: the speed, on a GPU, for a submission that passed (:func:`measure_perf`).

This module is the notebook's entry point and re-exports those pieces (``checker.make_case``,
``checker.evaluate``...), the names the grader, its worker and the specs call. In a notebook the learner's code
shares this process, so ``check`` is feedback, not proof: the batch grader (``gpucourse grade``) is what an
instructor trusts.
"""
from __future__ import annotations

import dataclasses
import time

from .. import device as _device
from .. import plots
from .check_call import (NOT_IMPLEMENTED, aliasing, exception_line, first_problem, forbidden_before_raise,
                         forbidden_problem, is_not_implemented, judge_case, learner_traceback, memory_problem,
                         raised_after_forbidden, run_call, run_case, storage_start)
from .check_cases import (call_values, case_seed, clone_args, drawn_case, drawn_note, make_case, new_seed, to_device,
                          value_to)
from .check_perf import draw_perf, measure_perf, prepare_perf
from .check_verdict import (NOOP_SHARE, CaseResult, course_problems, evaluate, noop_problem, strided_hint,
                            use_problems, value_hints)
from .exercise import JudgeTimeout
from .exercise import get as _get_exercise

__all__ = ["NOOP_SHARE", "NOT_IMPLEMENTED", "CaseResult", "CheckResult", "CheckerError", "aliasing", "call_values",
           "case_seed", "check", "clone_args", "course_problems", "draw_perf", "drawn_case", "drawn_note", "evaluate",
           "exception_line", "first_problem", "forbidden_before_raise", "forbidden_problem", "is_not_implemented",
           "judge_case", "learner_traceback", "make_case", "measure_perf", "memory_problem", "new_seed", "noop_problem",
           "prepare_perf", "raised_after_forbidden", "run_call", "run_case", "storage_start", "strided_hint",
           "to_device", "use_problems", "value_hints", "value_to"]


class CheckerError(RuntimeError):
    """A bug in the checker or the exercise spec, never the learner's fault."""


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
# The notebook entry point.


def _raised(ex, case, exc) -> tuple:
    """(status, message) when the learner's code raised on ``case``."""
    if is_not_implemented(exc):
        return "not implemented", f"{ex.function} {NOT_IMPLEMENTED}, then run this cell again."
    return "error", f"on case {case.name!r}:\n{learner_traceback(exc)}"


def _judged_cases(ex, fn, seed: int) -> tuple:
    """(case results, status, message) of a judged exercise: its judge runs each case on ``fn`` itself."""
    results, status, message = [], "passed", ""
    for index, case in enumerate(ex.cases):
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
    return results, status, message


def _compared_cases(ex, fn, seed: int) -> tuple:
    """(case results, status, message) of a compared exercise: each case's inputs made, ``fn`` called on copies of
    them on the device, and the verdict computed from the reference's answer."""
    dev = _device.torch_device()
    results, status, message = [], "passed", ""
    for index, case in enumerate(ex.cases):
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
    return results, status, message


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
    cases = _judged_cases if ex.judge is not None else _compared_cases
    results, status, message = cases(ex, fn, seed)
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
