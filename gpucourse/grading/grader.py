"""The batch grader behind ``gpucourse grade``: every submission in its own process, verdicts decided here.

The pipeline, read top-down below: :func:`grade` (the batch) -> staging.prepare (the staged copy, flags, a CUDA
prebuild) -> :func:`grade_prepared` (the worker process, process.py; the conversation, session.py; the verdict of a
worker that ended early, report.py) -> the report (report.py). Why each step is built the way it is (what a
submission can and cannot do to the grader, and the limits), and what each status means: docs/grading.md.
"""
from __future__ import annotations

import concurrent.futures
import os
import queue
import subprocess
import sys
import time

from .. import cuda_build
from .. import device as _device
from . import checker, gpulock, process, protocol, pycache, report, sandbox, staging
from .batch import Ahead, environment, gpu_index, gpu_slots, standing
from .batch import prebuild_jobs as _prebuild_jobs
from .process import MEMORY_MB, Capped, stack_margin, worker_threads
from .process import build_env as _build_env
from .process import read_stack as _read_stack
from .process import read_status as _read_status
from .process import threads_per_worker as _threads_per_worker
from .process import where_it_hung as _where_it_hung
from .process import worker_command as _worker_command  # called by this name: tests replace it here
from .progress import Progress as _Progress
from .progress import trace as _trace
from .report import Result
from .session import converse as _converse  # called by this name: tests replace it here
from .staging import Prepared, prepare, unstaged

DEFAULT_TIMEOUT = 60.0  # seconds per submission on a GPU, process start and import included
# In CPU mode Triton's interpreter runs every program of a launch in Python: a right kernel with small blocks took
# 10 s idle (flash_attention, 16x16 blocks, 2 cores) and 20-46 s under load (issue 39), so a verdict there must not
# hang on 60 s. A hang costs this much per submission, not more.
CPU_MODE_TIMEOUT = 180.0


def default_timeout() -> float:
    """The time limit per submission when the instructor gives none: :data:`DEFAULT_TIMEOUT` where kernels run on a
    GPU, :data:`CPU_MODE_TIMEOUT` where Triton's interpreter runs them."""
    return DEFAULT_TIMEOUT if _device.on_gpu() else CPU_MODE_TIMEOUT


def grade(ex, paths: list, timeout: float | None = None, jobs: int = 1, progress: bool | None = None,
          isolation: sandbox.Isolation | str | None = None, prebuild_jobs: int | None = None,
          allow_process_isolation: bool = False) -> dict:
    """Grade every path; returns ``{"exercise", "environment", "isolation", "standing", "results"}`` with results in
    the given order; ``standing`` (:func:`standing`) says whether they may be given points and ranked. ``progress``:
    print a line on stderr as each submission finishes (None: only where stderr is a terminal). ``isolation``: an
    Isolation, or "auto"/"bubblewrap"/"process" (default: $GPUCOURSE_ISOLATION, else auto: bubblewrap where it
    works); the level used is in the report, and said on stderr when it is not the full one.

    ``timeout``: seconds per submission (default: :func:`default_timeout`).

    ``jobs`` graded workers run at once. CUDA submissions on a GPU are first compiled by workers that see no GPU
    (staging.prebuild), ``prebuild_jobs`` at once (default: $GPUCOURSE_PREBUILD_JOBS, else ``jobs``), in the order
    given and ahead of the grading slots (at most ``jobs + prebuild_jobs`` submissions prepared and not yet graded): a
    slot that frees finds the next submission compiled, instead of compiling it itself (on the H100 a slot spent 19 s
    of its 46 s there)."""
    timeout = default_timeout() if timeout is None else timeout
    if not isinstance(isolation, sandbox.Isolation):
        isolation = sandbox.detect(isolation)
    if not isolation.sandboxed and (progress or (progress is None and sys.stderr.isatty())):
        print(f"gpucourse grade: isolation: {isolation.detail}", file=sys.stderr, flush=True)
    jobs = max(1, int(jobs))
    compiles = (prebuild_jobs or _prebuild_jobs() or jobs) if staging.needs_prebuild(ex) else 0
    talk = progress or (progress is None and sys.stderr.isatty())
    # where the installed packages carry no bytecode, compiled once for every worker to read
    pycache.prepare(say=_say if talk else None)
    _threads_per_worker[0] = worker_threads(jobs + compiles)
    if ex.kind == "cuda" and _device.on_gpu():  # built once, before any worker starts; read-only inside sandboxes
        cuda_build.prepare_shared()
        if ex.cuda_binding:  # the exercise's pybind11 module, compiled once; submissions declaring the same link it
            cuda_build.prepare_binding(*ex.cuda_binding)
    slots: queue.Queue = queue.Queue()
    for gpu in gpu_slots(jobs):
        slots.put(gpu)
    bar = _Progress(len(paths), sys.stderr.isatty() if progress is None else progress)
    ahead = Ahead(prepare, ex, paths, timeout, isolation, compiles, jobs) if compiles else None

    def task(index):
        path, st = paths[index], None
        try:
            if ahead is not None:
                _trace(path, "slot")  # a grading slot is free for it (its prebuild may still run)
                st = ahead.take(index)
            gpu = slots.get()
            try:
                r = (grade_prepared(ex, st, timeout, gpu, isolation=isolation) if st is not None else
                     grade_one(ex, path, timeout, gpu, isolation=isolation))
            finally:
                slots.put(gpu)
        except Exception as exc:  # a grader bug: say so, never blame the submission
            if st is not None:
                st.discard()
            r = Result(submission=path, status="error", score=0.0,
                       message=f"INTERNAL GRADER ERROR (not the submission's fault): {exc!r}",
                       flags=["internal grader error"])
        bar.update(r)
        return r

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(task, range(len(paths))))
    finally:
        _threads_per_worker[0] = None
        bar.close()
        if ahead is not None:
            ahead.close()
    return {"exercise": ex.id, "environment": environment(), "isolation": isolation.to_dict(),
            "standing": standing(isolation, allow_process_isolation), "results": [r.to_dict() for r in results]}


def grade_one(ex, path: str, timeout: float, gpu: str | None = None, mem_mb: int = MEMORY_MB,
              isolation: sandbox.Isolation | None = None) -> Result:
    """Grade one submission in a fresh worker process, in a bubblewrap sandbox where ``isolation`` (default:
    :func:`sandbox.detect`) says there is one."""
    isolation = isolation if isolation is not None else sandbox.detect()
    return grade_prepared(ex, prepare(ex, path, timeout, isolation, mem_mb), timeout, gpu, mem_mb, isolation)


def grade_prepared(ex, st: Prepared, timeout: float, gpu: str | None = None, mem_mb: int = MEMORY_MB,
                   isolation: sandbox.Isolation | None = None) -> Result:
    """Grade a submission made ready by :func:`prepare` in its graded worker; its folders are deleted afterwards.
    The time limit covers the prebuild and this worker together, not the wait between them (for a grading slot);
    ``seconds`` in the result is their sum."""
    if st.result is not None:
        return st.result
    t0 = time.monotonic()
    isolation = isolation if isolation is not None else sandbox.detect()
    path, staged, tmp = st.path, st.staged, st.tmp
    result = Result(submission=path, status="error", score=0.0, message="", flags=list(st.flags))
    on_gpu = _device.on_gpu()
    deadline = t0 + max(0.0, timeout - st.seconds)
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    status_r, status_w = os.pipe()  # how the worker ended, from its supervisor (worker.SUPERVISOR)
    stack_r, stack_w = os.pipe()  # the worker's Python stack just before the limit (process.where_it_hung)
    proc = out_cap = err_cap = None
    seed, nonce = checker.new_seed(), os.urandom(16).hex()
    lock = gpulock.for_gpu(gpu_index(gpu)) if on_gpu else None
    replied: list = []  # the worker's first message arrived (so a sandbox that did not start is told apart)
    doing = [("load", "")]  # what the grader last asked of the worker, (kind, case name): what a timeout interrupted
    argv, env, seen_as = _worker_command(staged, tmp, isolation, gpu, on_gpu, to_r, from_w, mem_mb, status_w,
                                         stack_w)
    if staging.needs_prebuild(ex):  # built for the GPU by its prebuild: the same build key here
        env.update(_build_env())
    try:
        proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=(to_r, from_w, status_w, stack_w),
                                start_new_session=True)
        for fd in (to_r, from_w, status_w, stack_w):  # the worker's ends
            os.close(fd)
        to_r = from_w = status_w = stack_w = None
        for fd in (to_w, from_r, stack_r):
            protocol.nonblocking(fd)
        out_cap, err_cap = Capped(proc.stdout), Capped(proc.stderr)
        _converse(ex, seen_as, result, seed, nonce, to_w, from_r, deadline, lock, replied, doing,
                  stack_margin(timeout))
    except protocol.Timeout:
        report.timed_out(result, timeout, doing, _where_it_hung(_read_stack(stack_r), staged, path), on_gpu)
    except protocol.Closed:
        code = process.wait_exit(proc)
        report.closed(result, isolation, replied, code, err_cap, _read_status(status_r))
    except protocol.Malformed as exc:
        report.tampered(result, exc)
    finally:
        process.close_fds(to_r, to_w, from_r, from_w, status_r, status_w, stack_r, stack_w)
        if proc is not None:
            process.kill_group(proc)
        for cap in (out_cap, err_cap):
            if cap is not None:
                cap.thread.join(timeout=2)
        st.discard()
    if st.course and result.status in ("passed", "failed"):  # a trapped solution's error says it already
        report.course_code(result, ex, st.course)
    if out_cap is not None:
        report.output_notes(result, out_cap, err_cap)
    result.message = unstaged(result.message, seen_as, path)
    for check in result.checks:
        check["detail"] = unstaged(check["detail"], seen_as, path)
    result.seconds = round(st.seconds + time.monotonic() - t0, 3)
    _trace(path, "end", status=result.status)
    if not result.timing:
        result.timing = ("not timed (CPU mode)" if not on_gpu else "not timed (no speed target)"
                         if ex.perf is None else "not timed (did not pass)")
    return result


def _say(text: str) -> None:
    print(f"gpucourse grade: {text}", file=sys.stderr, flush=True)


# The grader's names from before its split into the modules above, for the code, tests and benchmarks that import
# them from here.
from .batch import NOT_FOR_POINTS, PREBUILD_JOBS_ENV  # noqa: E402
from .flags import SUSPICIOUS, course_code_used, learner_source, shipped_cells, static_flags  # noqa: E402
from .outcome import Opaque as _Opaque  # noqa: E402
from .outcome import Outcome, meta_problem  # noqa: E402
from .outcome import unpack as _unpack  # noqa: E402
from .process import DOCTOR_ADVICE, FSIZE_MB, OUTPUT_KEEP, STACK_BYTES, STACK_FRAMES, THREADS_ENV  # noqa: E402
from .process import how_it_ended as _how_it_ended  # noqa: E402
from .process import worker_env as _worker_env  # noqa: E402
from .progress import TRACE_ENV  # noqa: E402
from .report import CSV_COLUMNS, first_failure, write_csv, write_json  # noqa: E402
from .session import PERF_NUMBERS, _perf_fields, _raised  # noqa: E402
from .staging import STAGED_NAME, stage_submission  # noqa: E402
from .staging import needs_prebuild as _needs_prebuild  # noqa: E402
from .staging import prebuild as _prebuild  # noqa: E402

__all__ = [
    "CPU_MODE_TIMEOUT", "CSV_COLUMNS", "DEFAULT_TIMEOUT", "DOCTOR_ADVICE", "FSIZE_MB", "MEMORY_MB", "NOT_FOR_POINTS",
    "OUTPUT_KEEP", "Outcome", "PERF_NUMBERS", "PREBUILD_JOBS_ENV", "Prepared", "Result", "STACK_BYTES",
    "STACK_FRAMES", "STAGED_NAME", "SUSPICIOUS", "THREADS_ENV", "TRACE_ENV", "course_code_used", "default_timeout",
    "environment", "first_failure", "gpu_index", "grade", "grade_one", "grade_prepared", "learner_source", "prepare",
    "shipped_cells", "stack_margin", "stage_submission", "standing", "static_flags", "unstaged", "worker_threads",
    "write_csv", "write_json",
    "_Opaque", "_Progress", "_build_env", "_converse", "_how_it_ended", "_meta_problem", "_needs_prebuild",
    "_outcome", "_perf_fields", "_prebuild", "_raised", "_read_stack", "_read_status", "_threads_per_worker",
    "_trace", "_unpack", "_where_it_hung", "_worker_command", "_worker_env",
]
_outcome = Outcome.from_message


def _meta_problem(expected, out) -> list:
    """outcome.meta_problem, under its name and arguments from before the split (``expected`` is not read)."""
    return meta_problem(out)
