"""Running the learner's function on one case: the call with poisoned allocations, launches counted and torch ops
recorded (:func:`run_call`; the batch grader runs it inside its isolated worker), the two calls and the skipped-launch
call of a case (:func:`run_case`), a judged exercise's judge (:func:`judge_case`), the problems found during the
calls (forbidden ops, memory, aliasing), and what the learner is told when their code raised."""
from __future__ import annotations

import collections
import contextlib
import os
import traceback
import warnings

import torch

from .. import device as _device
from . import compare, guards, launches
from .check_cases import call_values, clone_args

_HERE = os.path.dirname(os.path.abspath(__file__))

# What check, its CPU mode for CUDA exercises (cuda_check.py) and the batch grader say about a stub that still raises
# NotImplementedError; each prefixes the function's name.
NOT_IMPLEMENTED = ("raises NotImplementedError (not implemented yet): replace the `# YOUR CODE HERE` stub with your "
                   "code")


def judge_case(judge, fn, params: dict, seed: int) -> list:
    """The problems an exercise's judge (``JudgedExercise.judge``) finds with ``fn`` on one case (empty: it passed).
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


def storage_start(t) -> int | None:
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
    problems, where = [], storage_start(out)
    if where is not None:
        for i, a in enumerate(args):
            tensors = [a["buffer"]] if "buffer" in a else \
                [v for v in (a["value"] if isinstance(a["value"], (list, tuple)) else [a["value"]])
                 if isinstance(v, torch.Tensor)]
            if any(storage_start(t) == where for t in tensors):
                view = guards.view_of(a) if "buffer" in a else None
                if view is not None and (out.data_ptr(), out.shape, out.stride()) == \
                        (view.data_ptr(), view.shape, view.stride()):
                    problems.append(f"your output is your input: the tensor returned is argument {i + 1} itself; "
                                    f"compute the result into a new tensor")
                else:
                    problems.append(f"your output shares memory with argument {i + 1} (a view of it, or written "
                                    f"into it): compute the result into a new tensor")
                break
    if where is not None and storage_start(out2) == where:
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
    # read here, in the process that holds the output (the batch grader's worker sends it without its guard band)
    outcome["past_end"] = compare.past_end_writes(outcome["out"])
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


def learner_traceback(exc: BaseException) -> str:
    """The exception as the learner's own traceback: the checker's and the grader's frames (any module of this
    package) are left out."""
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
        if head.rsplit(".", 1)[-1] in names or \
                (not names and head.endswith(("Error", "Exception", "Exit", "Interrupt"))):
            return first_problem("\n".join(lines[i:])).strip()
    return lines[-1].strip() if lines else ""


def is_not_implemented(exc: BaseException) -> bool:
    return isinstance(exc, NotImplementedError)
