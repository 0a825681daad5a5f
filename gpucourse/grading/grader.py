"""The batch grader behind ``gpucourse grade``: every submission in its own process, verdicts decided here.

Security model (submissions are careless at best and hostile at worst):

* The seed of the inputs (``os.urandom``), the reference outputs and the comparison never leave this process. The
  worker (worker.py) gets one case's inputs at a time over a dedicated pipe and returns the raw outputs over another;
  this process compares them with its own reference. Printing "PASSED", exiting early, caching outputs between calls,
  or monkeypatching torch or the checker inside the worker changes nothing here: only correct outputs for fresh
  random inputs pass.
* Messages are read with ``torch.load(weights_only=True)`` and size caps that bound the decoding time, under the
  deadline (protocol.py): a hostile worker can send wrong data but cannot run code in the grader or stall it.
* The operating system isolates each worker (sandbox.py): under bubblewrap it has its own PID namespace (every
  process it starts, double-forked daemons included, dies with it, and it sees no other process), no network, its
  own user namespace without capabilities, a read-only view of the system, of Python and of the course package and
  nothing else of the machine: not the checkout's ``solutions/`` or ``tests/``, no other submission (only its own
  file, read-only), not the grader's environment or files; its only writable place is its private ``/tmp``, deleted
  afterwards. So it cannot hand in a classmate's answer or the instructor's, read the grader's secrets, plant a
  module that changes the reference for later workers or batches, or harm other workers. Where bubblewrap cannot
  run, the batch is graded at the process level and the report says so (``isolation``, JSON and CSV; ``gpucourse
  doctor`` says how to get the sandbox): then a submission can read and write whatever the grader's OS user can.
* Each submission runs in a fresh process in its own session (process group), in its own temporary directory, with
  ``RLIMIT_CORE=0``, ``RLIMIT_FSIZE`` and (CPU mode only: CUDA reserves huge virtual ranges) ``RLIMIT_AS``. Its
  environment is an allow-list (``_worker_env``: paths, locale, CUDA's variables, the course's mode), so the grader's
  other variables (tokens, credentials) never reach it, and HOME and every build cache (CUDA builds, torch
  extensions, Triton, inductor) point into its temporary directory: a submission cannot plant a compiled module
  that a later submission's build would load. Its stdout/stderr are drained into bounded buffers. On timeout, and
  always at the end, the whole process group is killed (and with it the sandbox). A crash, hang or CUDA fault
  therefore cannot reach the next submission; with several GPUs each job gets its own through
  ``CUDA_VISIBLE_DEVICES``. On a GPU the timed step holds a lock of its GPU that every other job's cases wait for
  (gpulock.py, taken here, outside the sandbox), so speed is measured alone; each result's ``timing`` says how. The
  timings wait for the jobs' cases to end (``gpulock.PATIENCE_S`` at most) and then run one after another under one
  hold, so that a timing does not stall every other job's cases once per timing. A CUDA submission is compiled first
  by a worker of its own that sees no GPU (``_prebuild``), run ahead of the grading slots by ``grade``; it shares
  nothing but its private folder, and that only with the same submission's graded worker.
* Outputs are poisoned and inputs surrounded by canaries (guards.py); every case runs twice where races are possible.
* The answer must come from the learner's kernels (Triton and CUDA exercises, launches.py): a torch compute op on the
  inputs or on anything derived from them fails the case, naming the op (allocation, views, copies and fills are
  allowed; ``Exercise.allowed_ops`` on derived results only); a Triton exercise's case is called a third time with
  every launch skipped, and an output that is still the answer fails ("the output does not come from your
  kernels"); launches of the course's own kernels do not count. Sizes are drawn here for every run from each case's
  class (``exercise.Draw``), from the secret seed: the worker receives only the tensors.
* Judged exercises (``Exercise.judge``: a timer, a loop that must not synchronize, answers judged against fresh
  numbers) have no output to compare here: their judge must watch the call. It runs inside the same isolated worker,
  through the same code as ``gpucourse.check`` (``checker.judge_case``), on the case's parameters and a seed sent from
  here, and only its list of problems comes back over the channel; the verdict is built from it exactly as for
  other exercises. Against a submission that patches what the judge relies on (``torch.allclose``,
  ``gpucourse.syncs.detect``, a tolerance, the sync detector's tables, torch's mode stack, a global forward hook),
  the worker snapshots all of that before loading the submission and restores it before the first case and after
  every call into the submission, and the judge sees only plain values from the function (judging.py); what had to
  be restored is flagged, and a change found after a verdict (made while the judge was deciding: a thread, a hook)
  makes the case an error. Printing fake results, exiting (``sys.exit`` is an error, ``os._exit`` a crash) and
  returning objects that lie about themselves do not pass.
* How a worker ended is reported by its supervisor (worker.SUPERVISOR: the worker's parent, non-dumpable, in the
  sandbox its PID 1, which nothing inside can kill), on a pipe of its own: killed by signal n, or exited with code
  n. bwrap's exit status alone is 128 + n for both, so a submission calling ``os._exit(137)`` would otherwise read
  as killed by SIGKILL. A worker that died before it said "loading" ran no code of the submission: bwrap could not
  start the sandbox (its first stderr line is reported, when the supervisor never started) or the worker could not
  start (its last line), an internal grader error with ``gpucourse doctor``'s advice.
* A timeout says where it hung: the case the grader last asked for (its own record) and the submission's innermost
  frames (at most STACK_FRAMES) at the limit. Every message tells the worker when the limit falls (``stack_at``,
  moved by waits for the GPU lock), and the worker has :mod:`faulthandler`'s watchdog write its Python stack shortly
  before it on a pipe of its own (``--stack-fd``, passed like the channel, so the same under bubblewrap and at the
  process level; worker._stack_alarm). The grader reads at most 4 x STACK_BYTES of it without blocking and treats
  it as untrusted text: only well-formed frame lines naming the submission's file are shown, with bounded numbers
  and names, and the code of each line comes from the grader's own copy (:func:`_where_it_hung`). A submission can
  cancel or forge it, which changes only what its report shows about where it hung.
* The submission is graded from a copy in a private folder named ``submission.py`` (or ``.ipynb``), bound read-only
  at ``/submission/``: the path the instructor gave (a student's name, ``submitted/<student>/``) reaches the
  submission neither through ``/proc/self/mountinfo`` (which shows every bind mount's source) nor bwrap's command
  line, ``__file__`` or a traceback. The report names it by the path given.

Known limitations, stated honestly. Without bubblewrap (the report's ``isolation`` is "process"), submissions run as
the grader's OS user and can read or write whatever that user can (the grader's files, the checkout, another
worker's temporary directory while it exists, the installed package). With it, a worker still shares the kernel, the
CPUs, memory, disk bandwidth and (on a GPU) the GPU with the other workers: it can slow its neighbours down, and a
kernel exploit is out of scope. The GPU lock keeps other jobs' cases away from a timing, not threads a submission
left running in its own worker. Inside the sandbox the submission shares the worker's process, so what the worker
*reports about itself* — which kernels were launched, which torch ops were called, allocation overruns, GPU timings,
and for judged exercises the judge's verdict itself — can be forged by code written to do so (for example by writing
a forged message to the result pipe, by patching the launch counters, or, judged, by reaching the judge's frames,
switching off torch's function hooks inside the call, or leaving code running beside the judge through an audit hook
or a dispatcher kernel): isolation from the machine does nothing against that. For exercises compared here,
correctness cannot be forged that way: a forged message still has to carry the right outputs. To make forging
visible, the grader scans the source and *flags* (without changing the status) code that reaches for the grader's
machinery (``gc.get_objects``, ``sys.modules``, ``gpucourse.grading``, ``os._exit``, ``ctypes``, ``/proc``, file
descriptors, frames, torch's dispatch hooks, interpreter hooks...), so a human looks at it: flags are a column of
the report, never the verdict. The paths of Python, the virtual environment and the course package show in the
sandbox's ``/proc/self/mountinfo`` (they are bound at their own paths; so may the instructor's home, where Python
lives there), and ``/usr`` is visible read-only: the system, not the course's secrets (a checkout inside ``/usr``
is hidden). At the process level a submission can kill its supervisor; its exit status then cannot tell a signal
from exit(128 + n), and the message says so.

Statuses: ``passed`` every correctness check passed; ``failed`` it ran but is wrong (wrong values, no required kernel
launched, wrong shape/dtype, elements never written, out-of-bounds writes, nondeterminism, modified inputs; judged:
any problem the judge found, e.g. a synchronization in the loop); ``error`` it could not be loaded or compiled, or
raised, or changed what the judge relies on while it was deciding (a thread, a hook); ``timeout``
over the time limit (an import that never finishes included); ``crashed`` the process died (segfault, abort,
``os._exit``, a CUDA fault). Score: the fraction of cases passed for passed/failed, 0 for error, timeout and crashed.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import csv
import dataclasses
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import torch

from .. import cuda_build
from .. import device as _device
from .. import env as _env
from . import checker, compare, gpulock, launches, protocol, pycache, sandbox

DEFAULT_TIMEOUT = 60.0  # seconds per submission on a GPU, process start and import included
# In CPU mode Triton's interpreter runs every program of a launch in Python: a right kernel with small blocks took
# 10 s idle (flash_attention, 16x16 blocks, 2 cores) and 20-46 s under load (issue 39), so a verdict there must not
# hang on 60 s. A hang costs this much per submission, not more.
CPU_MODE_TIMEOUT = 180.0


def default_timeout() -> float:
    """The time limit per submission when the instructor gives none: :data:`DEFAULT_TIMEOUT` where kernels run on a
    GPU, :data:`CPU_MODE_TIMEOUT` where Triton's interpreter runs them."""
    return DEFAULT_TIMEOUT if _device.on_gpu() else CPU_MODE_TIMEOUT
MEMORY_MB = 6144  # address-space limit per worker in CPU mode (torch + triton alone reserve about 1 GiB)
FSIZE_MB = 256  # largest file a submission may write
OUTPUT_KEEP = 32 * 1024  # bytes of stdout/stderr kept per stream (first and last half)
# Where each submission's time goes, for benchmarks/grading_throughput.py: with $GPUCOURSE_GRADE_TRACE set (in the
# grader's environment; workers never see it), one JSON line per event is appended to that file.
TRACE_ENV = "GPUCOURSE_GRADE_TRACE"
_trace_lock = threading.Lock()


def _trace(submission: str, event: str, **fields) -> None:
    """Append ``{"t", "submission", "event", **fields}`` to $GPUCOURSE_GRADE_TRACE (nothing when it is unset)."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    line = json.dumps({"t": round(time.monotonic(), 4), "submission": submission, "event": event, **fields})
    with _trace_lock, open(path, "a") as f:
        f.write(line + "\n")


SUSPICIOUS = [  # (regex, why a human should look)
    (r"\bgc\s*\.\s*get_objects|\bgc\s*\.\s*get_referr", "walks the garbage collector (gc.get_objects/referrers)"),
    (r"\bsys\s*\.\s*modules\b", "touches sys.modules"),
    (r"gpucourse\s*\.\s*grading|from\s+gpucourse\s+import\s+grading|gpucourse\s*\.\s*lessons\b[\w.]*\.\s*exercises|"
     r"\bexercises\s+import\b",
     "reaches into the grader or the exercise specs"),
    (r"gpucourse\s*\.\s*lessons\b|from\s+gpucourse\s+import\s+lessons\b",
     "imports the course's lessons (the instructor's own kernels and helpers)"),
    (r"\bos\s*\.\s*_exit\b|\bos\s*\.\s*kill\b|\bsignal\s*\.", "exits or signals the process itself"),
    (r"\bctypes\b|\bcffi\b", "uses ctypes/cffi (raw memory access)"),
    (r"/proc/|\bos\s*\.\s*(write|fdopen|dup2?)\b|\bfdopen\b", "writes to raw file descriptors or reads /proc"),
    (r"\bsys\s*\._getframe\b|\binspect\s*\.\s*(stack|currentframe)|\bf_back\b", "inspects the caller's frames"),
    (r"\bbuiltins\b|__builtins__", "modifies builtins"),
    (r"setattr\s*\(\s*(torch|triton)|\btorch\s*\.\s*\w+\s*=[^=]|\btorch\.Tensor\s*\.\s*\w+\s*=[^=]|"
     r"\btriton\s*\.[\w.]+\s*=[^=]", "monkeypatches torch or triton"),
    (r"\b(syncs|trainloop|roofline|asyncqueue|exercises\.\w+)\s*\.\s*\w+\s*(\.\s*\w+\s*)*=[^=]|"
     r"setattr\s*\(\s*(gpucourse|syncs|trainloop|roofline|asyncqueue)\b",
     "monkeypatches the course's helpers (what judges rely on)"),
    (r"DisableTorchFunction|_disable_torch_function|torch_function_stack|_set_torch_function_state|"
     r"TorchFunctionMode|TorchDispatchMode|__torch_function__|__torch_dispatch__|torch\.library|\btorch\._C\b|"
     r"set_sync_debug_mode|function_mode_stack|dispatch_mode_stack|_disable_current_modes|_python_dispatch|"
     r"DisableTorchDispatch|_ExcludeDispatchKeyGuard",
     "hooks into or switches off torch's dispatch (modes, torch.library, torch._C): the sync detector and the op "
     "recorder rely on it"),
    (r"\bsys\s*\.\s*(settrace|setprofile|addaudithook|monitoring)|\bgc\s*\.\s*callbacks|\bweakref\b|"
     r"\bthreading\b|\b_thread\b|\bdef\s+__del__", "installs hooks or threads that run code later"),
    (r"\bsubprocess\b|\bos\s*\.\s*(system|popen|fork)\b|\bmultiprocessing\b", "starts other processes"),
    (r"\bsocket\b|\burllib\b|\brequests\b", "uses the network"),
]


@dataclasses.dataclass
class Result:
    submission: str
    status: str
    score: float
    message: str
    checks: list = dataclasses.field(default_factory=list)  # [{"name", "passed", "detail"}]
    flags: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    timing: str = ""  # how its speed was timed: "alone on GPU 0", "not timed (CPU mode)"...
    perf: dict | None = None  # the timed step's numbers (GPU, passed, a speed target): see _perf_fields

    def to_dict(self) -> dict:
        d = {"submission": self.submission, "status": self.status, "score": float(self.score),
             "message": self.message, "checks": self.checks, "flags": self.flags, "seconds": self.seconds,
             "timing": self.timing}
        if self.perf is not None:  # only where a speed was measured: the leaderboard reads it
            d["perf"] = self.perf
        return d


class _Capped:
    """Drains a pipe in a thread, keeping the first and last OUTPUT_KEEP/2 bytes and counting the rest."""

    def __init__(self, stream):
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream):
        half = OUTPUT_KEEP // 2
        try:
            while chunk := stream.read1(1 << 16):
                self.total += len(chunk)
                room = half - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                self.tail = (self.tail + chunk)[-half:]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        mid = f"\n[... {dropped} bytes left out ...]\n" if dropped > 0 else ""
        return (bytes(self.head).decode(errors="replace") + mid + bytes(self.tail).decode(errors="replace"))


def static_flags(source: str) -> list:
    """Reasons, from the source text alone, for a human to look at a submission."""
    return [f"source {why}" for pattern, why in SUSPICIOUS if re.search(pattern, source)]


def _read_source(path: str) -> str:
    """The code the learner wrote (:func:`learner_source`), "" when it cannot be read."""
    try:
        return learner_source(path)
    except Exception:  # an unreadable file is reported by the worker as an error
        return ""


def _cell_key(source: str) -> str:
    """A code cell as compared with the course's: trailing spaces and blank lines at either end ignored."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


@functools.lru_cache(maxsize=1)
def shipped_cells() -> frozenset:
    """The code cells of the workbooks the course hands out (exercises/*.ipynb, generated from solutions/), as
    :func:`_cell_key`s; empty where the checkout's exercises/ is not there (then every cell counts as the learner's).
    The shipped cells import the course's modules (demos, helpers, ``gpucourse.check``): a flag every honest
    learner's workbook got would teach instructors to ignore flags (issue 39)."""
    from .. import workbooks

    folder = os.path.join(workbooks.ROOT, "exercises")
    cells: set = set()
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if name.endswith(".ipynb"):
            with contextlib.suppress(Exception):
                cells.update(_cell_key(c) for c in workbooks.code_cells(os.path.join(folder, name)))
    return frozenset(cells)


def learner_source(path: str) -> str:
    """The code the learner wrote, which flags and the course-code check read: a .py file whole (of a workbook saved
    as a script, its chunks that are not shipped cells: :func:`_script_learner_source`); of a notebook, the code
    cells that are not the course's own (identical to a cell of a workbook it ships: :func:`shipped_cells`)."""
    if not path.endswith(".ipynb"):
        with open(path, encoding="utf-8", errors="replace") as f:
            return _script_learner_source(f.read())
    from ..workbooks import code_cells

    shipped = shipped_cells()
    return "\n".join(f"# cell {i}\n{source}\n" for i, source in enumerate(code_cells(path))
                     if _cell_key(source) not in shipped)


_CELL_MARK = re.compile(r"#\s*(In\s*\[[^\]]*\]:|%%.*)\s*")  # nbconvert's "# In[3]:", jupytext's "# %%"


def _script_learner_source(text: str) -> str:
    """Of a workbook saved as a script (``jupyter nbconvert --to script``: cells after ``# In[ ]:``, markdown as
    comments; jupytext: ``# %%``), the chunks that are not a shipped cell (:func:`shipped_cells`), each compared
    with and without the comment lines that follow it (nbconvert writes the next markdown cell there); a script
    without such marks is the learner's whole. Chunks kept keep their line numbers (blanked ones become empty)."""
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if _CELL_MARK.fullmatch(line)]
    if not marks:
        return text
    shipped = shipped_cells()
    bounds = marks + [len(lines)]
    out = list(lines)
    for start, end in zip(bounds, bounds[1:]):
        chunk = lines[start + 1:end]
        while chunk and not chunk[-1].strip():
            chunk = chunk[:-1]
        cut = len(chunk)
        while True:
            if _cell_key("\n".join(chunk[:cut])) in shipped:
                out[start + 1:start + 1 + cut] = [""] * cut
                break
            if cut == 0 or not (chunk[cut - 1].lstrip().startswith("#") or not chunk[cut - 1].strip()):
                break
            cut -= 1
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def course_code_used(source: str) -> list:
    """Where ``source`` (the learner's own code) imports the course's lessons, the instructor's kernels and helpers:
    ``["line 3: from gpucourse.lessons.l07_quantization.kernels import w8a16_gemv"]``, from its syntax tree (a
    comment or a docstring naming them is not a use). The exercise specs (``...exercises...``) are left to the flags:
    reaching into them is tampering with the grader, not an answer. A name built at run time escapes this; the
    worker's launch counting still sees the course's Triton kernels, and the flag a human sees stays."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if re.fullmatch(r"gpucourse\.lessons(\.\w+)*", node.value) else []
        if any(_is_course_lesson(n) for n in names):
            where = lines[node.lineno - 1].strip()[:120] if 0 < node.lineno <= len(lines) else ""
            found.append(f"line {node.lineno}: {where}")
    return found


def _is_course_lesson(module: str) -> bool:
    """Whether ``module`` is (in) the course's lessons, the exercise specs excepted (see :func:`course_code_used`)."""
    parts = module.split(".")
    return parts[:2] == ["gpucourse", "lessons"] and "exercises" not in parts


def _course_code(result: Result, ex, found: list) -> None:
    """The verdict of a submission that ran the course's own code: an error, as the course's trapped solutions are
    (``is the course's own solution``); what it said otherwise stays in its checks."""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    result.status, result.score = "error", 0.0
    result.message = (f"{ex.function} used the course's own code: it imports the course's lessons (the instructor's "
                      f"kernels and helpers) at {found[0]}{more}; an answer computed by them is not yours: write "
                      f"your own")


# The grader's environment variables a worker gets (exact names, or prefixes ending in "_"); nothing else passes.
# Builds need the compilers and CUDA (PATH, CUDA_HOME, CC, LIBRARY_PATH...); the caches are set per worker below.
ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "LC_", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
               "VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_", "NVIDIA_", "CC", "CXX", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS",
               "OMP_NUM_THREADS", "TRITON_")


THREADS_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_threads_per_worker: list = [None]  # set by grade() for its batch: the machine's cores shared among its jobs


def worker_threads(jobs: int) -> int:
    """CPU threads per worker when ``jobs`` run at once: the cores shared among them (at least one). Each worker is
    a torch process whose thread pools default to every core, and a batch of --jobs 16 on 16 cores otherwise runs
    16 x 16 threads whose spinning costs CPU the compiles need (on the H100, 17.4 -> 13.8 s of CPU per CUDA
    submission with one thread each, benchmarks/results/h100-grading-cpu.json)."""
    return max(1, (os.cpu_count() or 1) // max(1, int(jobs)))


def _worker_env(gpu: str | None, tmp: str) -> dict:
    """The environment of the worker whose temporary directory is ``tmp``: the allow-listed variables only, and
    HOME and every cache in ``tmp``, so nothing the grader keeps in its environment and no cache is shared."""
    env = {k: v for k, v in os.environ.items()
           if k in ENV_ALLOWED or any(p.endswith("_") and k.startswith(p) for p in ENV_ALLOWED)}
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pythonpath = os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = pkg_root + (os.pathsep + pythonpath if pythonpath else "")
    env.update(MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", GPUCOURSE_MODE=_device.mode(),
               HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, ".cache"),
               GPUCOURSE_CACHE=os.path.join(tmp, ".gpucourse"),
               TORCH_EXTENSIONS_DIR=os.path.join(tmp, ".torch_extensions"),
               TRITON_HOME=tmp, TRITON_CACHE_DIR=os.path.join(tmp, ".triton"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, ".inductor"), TMPDIR=tmp, USER="grader",
               LOGNAME="grader")
    if _device.mode() == "cpu":
        env["TRITON_INTERPRET"] = "1"
    if _threads_per_worker[0] is not None and "OMP_NUM_THREADS" not in os.environ:  # the instructor's, where set
        env.update(dict.fromkeys(THREADS_ENV, str(_threads_per_worker[0])))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    env.update(cuda_build.worker_env())  # the read-only precompiled header prepared in grade(), the build layout
    env.update(pycache.worker_env())  # bytecode the grader compiled where the installed packages have none
    return env


SIGNAL_CAUSES = {  # what a signal that killed a worker most likely means, where its name does not say
    "SIGKILL": "out of memory, or a kill signal",
    "SIGXCPU": "over its CPU-time limit",
    "SIGXFSZ": "over its file-size limit",
    "SIGBUS": "a bad memory access, e.g. past the end of a mapped file or /dev/shm",
}


def _signal_name(code: int, cause: bool = True) -> str:
    """The signal of a negative exit status (-n: killed by signal n), with its likely cause where the name alone
    does not say (SIGNAL_CAUSES; ``cause=False``: the name only): "SIGSEGV", "SIGXCPU (over its CPU-time limit)"."""
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
    return f"{name} ({SIGNAL_CAUSES[name]})" if cause and name in SIGNAL_CAUSES else name


def _unpack(value):
    """A returned value as the worker described it: a tensor, a number, or something else (kept as a string)."""
    if not isinstance(value, dict):
        raise protocol.Malformed("result value is not a dict")
    if "tensor" in value:
        t = value["tensor"]
        if type(t) is not torch.Tensor or compare.dense_problem(t) is not None:  # the worker sends dense ones only
            raise protocol.Malformed("tensor field is not a dense tensor")
        return t, str(value.get("device", "?"))
    if "number" in value:
        return float(value["number"]), None
    problem = str(value["problem"])[:300] if "problem" in value else None  # a tensor without plain values
    return _Opaque(str(value.get("type", "?")), problem), None


class _Opaque:
    """Stands for a returned object that is neither a tensor nor a number (e.g. None, a list), or for a tensor that
    has no plain values to send (``problem`` says why: sparse, meta...)."""

    def __init__(self, type_name: str, problem: str | None = None):
        self.type_name = type_name
        self.problem = problem


def _counts(value) -> dict:
    """Counts sent by the worker (launches, ops), as {str: int}; raises on anything else."""
    return {str(k): int(v) for k, v in dict(value or {}).items()}


def _outcome(msg: dict, n_args: int) -> dict:
    """What the submission's call did, from a "result" message, in the form checker.evaluate reads. A message that
    is not what the worker sends (fields missing or of the wrong type) raises protocol.Malformed: only a submission
    that writes to the channel can produce one, so it is the submission's doing, not the grader's."""
    try:
        out, out_device = _unpack(msg["out"])
        out2 = _unpack(msg["out2"])[0] if msg.get("out2") is not None else None
        noop = _unpack(msg["noop_out"])[0] if msg.get("noop_out") is not None else None
        buffers = list(msg.get("buffers_after") or [])
        if len(buffers) != n_args or any(b is not None and (type(b) is not torch.Tensor or
                                                            compare.dense_problem(b) is not None) for b in buffers):
            raise protocol.Malformed("input buffers missing")
        return {"out": out, "out_device": out_device, "out2": out2, "buffers_after": buffers, "noop_out": noop,
                "triton_launches": _counts(msg.get("triton_launches")),
                "cuda_launches": _counts(msg.get("cuda_launches")), "ops": _counts(msg.get("ops")),
                "uses": _counts(msg.get("uses")), "course_launches": _counts(msg.get("course_launches")),
                "overruns": [str(s) for s in list(msg.get("overruns") or [])[:10]],
                "aliasing": [str(s) for s in list(msg.get("aliasing") or [])[:10]]}
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise protocol.Malformed(f"unreadable result ({type(exc).__name__})") from None


def _meta_problem(expected, out) -> list:
    if isinstance(out, _Opaque):
        if out.problem is not None:
            return [out.problem]
        if out.type_name == "NoneType":
            return ["returned None: return the output tensor (did you forget `return out`?)"]
        return [f"returned a {out.type_name}, expected a torch.Tensor"]
    return []


def gpu_index(gpu: str | None) -> str:
    """The GPU a job slot uses, as CUDA_VISIBLE_DEVICES names it (its slot's, else the first visible one)."""
    if gpu is not None:
        return gpu
    visible = [s.strip() for s in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if s.strip()]
    return visible[0] if visible else "0"


@dataclasses.dataclass
class Prepared:
    """A submission made ready for its graded worker: its staged copy, its private folder (where a CUDA
    submission's prebuild left its extension), the flags of its source, and the seconds spent so far (the
    prebuild: they count against its time limit). ``result``: the final result where it cannot be graded."""
    path: str
    stage: str = ""
    staged: str = ""
    tmp: str = ""
    flags: list = dataclasses.field(default_factory=list)
    course: list = dataclasses.field(default_factory=list)  # where its own code imports the lessons (course_code_used)
    seconds: float = 0.0
    result: Result | None = None

    def discard(self) -> None:
        """Delete its folders (a batch that ended before it was graded)."""
        for folder in (self.tmp, self.stage):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)


def _needs_prebuild(ex) -> bool:
    return _device.on_gpu() and ex.kind == "cuda"


def prepare(ex, path: str, timeout: float, isolation: sandbox.Isolation, mem_mb: int = MEMORY_MB) -> Prepared:
    """Everything before a submission's graded worker: the staged copy (:func:`stage_submission`), its source's
    flags, its private folder and, for a CUDA submission on a GPU, its prebuild (:func:`_prebuild`: no GPU, no
    lock). ``grade`` runs this for the next submissions while the graded workers of earlier ones run, so a grading
    slot never waits through a compile that could have been made ahead."""
    t0 = time.monotonic()
    st = Prepared(path=path, stage=tempfile.mkdtemp(prefix="gpucourse-submission-"))
    try:
        st.staged = stage_submission(path, st.stage)
    except OSError as exc:
        st.discard()
        r = Result(submission=path, status="error", score=0.0,
                   message=f"could not read the submission: {exc.strerror or exc}", timing="not timed (did not run)")
        r.checks.append({"name": "load", "passed": False, "detail": f"{type(exc).__name__}: {exc}"})
        r.seconds = round(time.monotonic() - t0, 3)
        st.result = r
        return st
    try:
        source = _read_source(st.staged)
        st.flags, st.course = static_flags(source), course_code_used(source)
        st.tmp = tempfile.mkdtemp(prefix="gpucourse-grade-")
        _trace(path, "start")
        if _needs_prebuild(ex):  # compiled first by a worker with no GPU, holding no lock (see _prebuild)
            _prebuild(ex, st.staged, st.tmp, isolation, t0 + timeout, mem_mb)
            _trace(path, "prebuilt")
    except BaseException:
        st.discard()
        raise
    st.seconds = time.monotonic() - t0
    return st


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
    prebuilt = _needs_prebuild(ex)
    deadline = t0 + max(0.0, timeout - st.seconds)
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    status_r, status_w = os.pipe()  # how the worker ended, from its supervisor (worker.SUPERVISOR)
    stack_r, stack_w = os.pipe()  # the worker's Python stack just before the limit (_where_it_hung)
    proc = out_cap = err_cap = None
    seed, nonce = checker.new_seed(), os.urandom(16).hex()
    lock = gpulock.for_gpu(gpu_index(gpu)) if on_gpu else None
    replied = []  # the worker's first message arrived (so a sandbox that did not start is told apart)
    doing = [("load", "")]  # what the grader last asked of the worker, (kind, case name): what a timeout interrupted
    argv, env, seen_as = _worker_command(staged, tmp, isolation, gpu, on_gpu, to_r, from_w, mem_mb, status_w,
                                         stack_w)
    if prebuilt:
        env.update(_build_env())
    try:
        proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=(to_r, from_w, status_w, stack_w),
                                start_new_session=True)
        os.close(to_r)
        os.close(from_w)
        os.close(status_w)
        os.close(stack_w)
        to_r = from_w = status_w = stack_w = None
        protocol.nonblocking(to_w)
        protocol.nonblocking(from_r)
        protocol.nonblocking(stack_r)
        out_cap, err_cap = _Capped(proc.stdout), _Capped(proc.stderr)
        _converse(ex, seen_as, result, seed, nonce, to_w, from_r, deadline, lock, replied, doing,
                  stack_margin(timeout))
    except protocol.Timeout:
        result.status, result.score = "timeout", 0.0
        frames = _where_it_hung(_read_stack(stack_r), staged, path)
        kind, what = doing[-1]
        during = {"load": "while loading the submission (its top-level code)",
                  "case": f"while running case {what!r}"}.get(kind, f"during {what}")
        at = f", at {frames[0]}" if frames else ""
        result.message = f"over the time limit of {timeout:g} s {during}{at} (a hang, an endless loop, or a slow " \
                         f"import?" + (")" if on_gpu else "; in CPU mode Triton's interpreter runs every program in " \
                                                          "Python, so a kernel of very small blocks is slow too)")
        reason = first_failure(result.checks)
        if reason:
            result.message += f"; before that, {reason}"
        result.checks.append({"name": what if kind == "case" else kind, "passed": False, "detail": (
            f"over the time limit of {timeout:g} s {during}; " + (
                "where it was at the limit (innermost first):\n" + "\n".join(f"  {f}" for f in frames) if frames
                else "where it was at the limit is unknown (no line of the submission was running, or its stack "
                     "could not be had)"))})
    except protocol.Closed:
        code = _wait_exit(proc)
        ended = _read_status(status_r)
        result.status, result.score = "crashed", 0.0
        reason = first_failure(result.checks)  # what was found wrong before the crash, the likelier cause
        start = _start_failure(isolation, replied, code, err_cap, ended)
        if start:
            result.status = "error"
            result.message = f"INTERNAL GRADER ERROR (not the submission's fault): {start}"
            result.flags.append("internal grader error")
        else:
            result.message = _how_it_ended(code, ended, isolation.sandboxed)
            if reason:
                result.message += (" after " if result.message.startswith("the process died") else
                                   "; before that, ") + reason
    except protocol.Malformed as exc:
        result.status, result.score = "error", 0.0
        result.message = (f"tampering with the grader's channel: the worker sent a message it never sends ({exc}); "
                          f"only the submission's code can write one")
        result.flags.append("tampered with the grader's channel")
    finally:
        _close(to_r, to_w, from_r, from_w, status_r, status_w, stack_r, stack_w)
        if proc is not None:
            _kill_group(proc)
        for cap in (out_cap, err_cap):
            if cap is not None:
                cap.thread.join(timeout=2)
        st.discard()
    if st.course and result.status in ("passed", "failed"):  # a trapped solution's error says it already
        _course_code(result, ex, st.course)
    if out_cap is not None:
        total = out_cap.total + err_cap.total
        if total > OUTPUT_KEEP:
            result.flags.append(f"printed {total / 1e6:.1f} MB of output (kept the first and last "
                                f"{OUTPUT_KEEP // 2048} KiB of each stream)")
        if result.status in ("crashed", "error", "timeout"):
            tail = err_cap.text()[-2000:].strip()
            if tail:
                for check in result.checks[-1:]:
                    check["detail"] = (check["detail"] + "\nstderr (end):\n" + tail).strip()
                if not result.checks:
                    result.checks.append({"name": "load", "passed": False, "detail": "stderr (end):\n" + tail})
    result.message = unstaged(result.message, seen_as, path)
    for check in result.checks:
        check["detail"] = unstaged(check["detail"], seen_as, path)
    result.seconds = round(st.seconds + time.monotonic() - t0, 3)
    _trace(path, "end", status=result.status)
    if not result.timing:
        result.timing = ("not timed (CPU mode)" if not on_gpu else "not timed (no speed target)"
                         if ex.perf is None else "not timed (did not pass)")
    return result


STAGED_NAME = "submission"  # the file name every submission is graded under (its extension kept)


def stage_submission(path: str, folder: str) -> str:
    """A copy of the submission at ``path`` in ``folder`` (a private temporary directory) under a fixed name,
    ``submission.py`` or ``submission.ipynb``: what the worker reads and, under bubblewrap, what is bound into its
    sandbox. So neither the path the instructor gave nor the file's name (a student's name, an nbgrader
    ``submitted/<student>/`` folder) reaches the submission: not through its ``__file__``, a traceback, the bwrap
    command line (``/proc/1/cmdline`` in the sandbox) or ``/proc/self/mountinfo``, which shows each bind mount's
    source path. The report still names the submission by ``path``. Raises OSError when it cannot be read."""
    dest = os.path.join(folder, STAGED_NAME + (".ipynb" if path.endswith(".ipynb") else ".py"))
    shutil.copyfile(path, dest)  # raises for a folder, a FIFO (shutil.SpecialFileError is an OSError) or no file
    os.chmod(dest, 0o444)
    return dest


def unstaged(text: str, seen_as: str, path: str) -> str:
    """``text`` (a message or a check's detail) with the staged copy's names put back to the submission's: its path
    as the worker saw it becomes ``path`` as given, and the fixed names (``submission.py:24`` from a judge, a
    notebook's ``submission_notebook.py``) the given file's, so the report reads as before staging."""
    staged, given = os.path.basename(seen_as), os.path.basename(path)
    text = text.replace(seen_as, path)
    # Replacements given as functions: a file name is the student's choice, and backslashes in a replacement string
    # would be read as escapes (r"a\g.py" raises, r"a\1.py" rewrites).
    notebook = os.path.splitext(given)[0] + "_notebook.py"
    text = re.sub(rf"(?<![\w.-]){re.escape(STAGED_NAME)}_notebook\.py\b", lambda m: notebook, text)
    return re.sub(rf"(?<![\w.-]){re.escape(staged)}\b", lambda m: given, text)


def _read_status(fd: int | None) -> dict:
    """What the worker's supervisor wrote (worker.SUPERVISOR): {"started": bool, "signal": n} or {..., "exit": n},
    or {"started": False} when it wrote nothing (the worker never started, or the pipe was already read)."""
    if fd is None:
        return {"started": False}
    data = b""
    try:
        protocol.nonblocking(fd)
        while len(data) < 256 and (chunk := os.read(fd, 256)):
            data += chunk
    except OSError:  # nothing more now (a supervisor still alive, or stopped)
        pass
    ended = {"started": False}
    for line in data.decode(errors="replace").splitlines():
        kind, _, value = line.partition(" ")
        if kind == "started":
            ended["started"] = True
        elif kind in ("signal", "exit") and value.isdigit() and ended["started"]:
            ended[kind] = int(value)
    return ended


def _how_it_ended(code: int | None, ended: dict, sandboxed: bool) -> str:
    """The message for a worker that closed the channel before grading finished. ``ended``: its supervisor's report
    (worker.SUPERVISOR), which tells a signal from an exit status for sure. Without a final report (the submission
    killed its supervisor), only the exit status is known: under bubblewrap 128 + n both for a process killed by
    signal n and for one that called exit(128 + n), so the message says both; at the process level, the signal that
    killed the supervisor."""
    if "signal" in ended:
        return f"the process died: killed by {_signal_name(-ended['signal'])}"
    if "exit" in ended:
        code = ended["exit"]
    elif code is None:
        return "the process stopped answering and did not exit (it was killed when grading ended)"
    elif ended.get("started"):
        if code < 0:
            return (f"the process ended without saying how: its supervisor was killed by {_signal_name(code, False)} (by "
                    f"the submission?)")
        if sandboxed and 128 < code < 128 + 65:
            return (f"the process exited with status {code} (128+{code - 128}: killed by {_signal_name(128 - code, False)}, "
                    f"or exit({code})) without saying which: its supervisor was killed first (by the submission?)")
    elif code < 0:  # no supervisor (a worker started without one): Popen's own report
        return f"the process died: killed by {_signal_name(code)}"
    return (f"the process exited (code {code}) before grading finished: os._exit(), a fatal error, or a CUDA "
            f"fault")


def _close(*fds) -> None:
    """Close the channel's file descriptors that are still open (None: already handed to the worker)."""
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _worker_command(path: str, tmp: str, isolation, gpu: str | None, gpu_nodes: bool, to_r: int, from_w: int,
                    mem_mb: int, status_fd: int | None = None, stack_fd: int | None = None) -> tuple:
    """(argv, env, the submission's path as the worker sees it) for a worker on the channel ``to_r``/``from_w``,
    in the sandbox where ``isolation`` has one (with the GPU device nodes bound in when ``gpu_nodes``). With
    ``status_fd``, the worker starts a supervisor that reports there how it ended; in the sandbox, as its PID 1.
    With ``stack_fd``, the worker writes its Python stack there just before the time limit (_where_it_hung)."""
    argv = [sys.executable, "-m", "gpucourse.grading.worker", "--rfd", str(to_r), "--wfd", str(from_w),
            "--mem-mb", str(mem_mb), "--fsize-mb", str(FSIZE_MB)]
    if stack_fd is not None:
        argv += ["--stack-fd", str(stack_fd)]
    if status_fd is not None:
        from .worker import supervised

        argv = supervised(argv, status_fd)
    if isolation.sandboxed:
        return (sandbox.command(isolation, argv, tmp, path, gpu_nodes, as_pid_1=status_fd is not None),
                _worker_env(gpu, sandbox.INSIDE_TMP), sandbox.inside_path(path))
    return argv, _worker_env(gpu, tmp), os.path.abspath(path)


def _build_env() -> dict:
    """What both workers of a CUDA submission get, so they compute the same build: the GPU's arch for the course's
    build key and for torch's nvcc flags (a worker that sees no GPU would otherwise build for every arch)."""
    arch = cuda_build.device_arch()
    digits = re.sub(r"\D", "", arch)
    return {cuda_build.ARCH_ENV: arch,
            "TORCH_CUDA_ARCH_LIST": f"{digits[:-1]}.{digits[-1]}" + ("a" if arch.endswith("a") else "")}


def _prebuild(ex, path: str, tmp: str, isolation, deadline: float, mem_mb: int) -> None:
    """Compile a CUDA submission before it is graded, in a worker that sees no GPU and holds no GPU lock.

    A CUDA submission builds its extension inside its first call, some 20 s of compiling. Made in the graded worker,
    that call would hold the GPU's shared lock all that time, and a timing waiting for the exclusive lock holds back
    every other job's cases behind it: on the H100 a batch at --jobs 16 moved in waves and graded 4.3 submissions a
    minute. So a first worker, in the same sandbox but with no GPU device (CPU mode, ``CUDA_VISIBLE_DEVICES`` empty),
    is given the first case's inputs on the CPU; the submission's ``cuda_build.build`` then compiles for the grader's
    GPU (``PREBUILD_ENV``) into the private /tmp the graded worker will share, and finds up to date. Whatever happens
    here (a compile error, a crash, a hang until ``deadline``) is left for the graded worker to meet and report: it
    runs the same code and has what time is left. ``grade`` runs these in a pool of their own, ahead of the grading
    slots (:class:`_Ahead`): in a slot, this compile still made a slot wait 19 s of its 46 s on the H100."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    proc = None
    argv, env, seen_as = _worker_command(path, tmp, isolation, None, False, to_r, from_w, mem_mb)
    env.update(_build_env(), GPUCOURSE_MODE="cpu", CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1")
    env[cuda_build.PREBUILD_ENV] = "1"
    nonce = os.urandom(16).hex()
    try:
        proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(to_r, from_w), start_new_session=True)
        os.close(to_r)
        os.close(from_w)
        to_r = from_w = None
        protocol.nonblocking(to_w)
        protocol.nonblocking(from_r)
        protocol.send(to_w, {"type": "hello", "nonce": nonce, "exercise": ex.id, "submission": seen_as}, deadline)
        msg = protocol.recv(from_r, deadline)
        if _expected(msg, nonce, ("loading", "ready", "load_error"))["type"] == "loading":  # before the submission
            msg = _expected(protocol.recv(from_r, deadline), nonce, ("ready", "load_error"))
        if msg["type"] == "ready" and ex.cases:
            seed = checker.new_seed()
            args, _ = checker.make_case(ex, ex.cases[0], seed, 0)
            protocol.send(to_w, {"type": "case", "index": 0, "args": args, "nonce": nonce}, deadline)
            protocol.recv(from_r, deadline)
    except (protocol.Timeout, protocol.Closed, protocol.Malformed, OSError):
        pass
    finally:
        _close(to_r, to_w, from_r, from_w)
        if proc is not None:
            _kill_group(proc)


DOCTOR_ADVICE = ("`gpucourse doctor` checks the sandbox and says how to get it working; `--isolation process` "
                 "grades without it")


def _start_failure(isolation, replied: list, code, err_cap, ended: dict) -> str:
    """Why the worker never started, when that is the grader's or the machine's failure, not the submission's: the
    worker died without a word (its first, "loading", comes before it reads the submission, so no code of the
    submission has run). Under bubblewrap, when the supervisor never started either, bwrap's own first stderr line
    ("bwrap: ...": it could not create a namespace, a bind source is missing, an option this bwrap lacks); else the
    worker's last stderr line. "" when the worker spoke (whatever happened next is the submission's doing) or the
    process did not exit."""
    if replied or code is None or code == 0:
        return ""
    lines = []
    if err_cap is not None:
        err_cap.thread.join(timeout=2)
        lines = [line.strip() for line in err_cap.text().strip().splitlines() if line.strip()]
    if isolation.sandboxed and not ended.get("started") and lines and lines[0].startswith("bwrap: "):
        return f"the sandbox did not start: {lines[0][:300]}; to fix: {sandbox.fix_hint(lines[0])}; {DOCTOR_ADVICE}"
    said = lines[-1][:300] if lines else f"exit status {code}, nothing on stderr"
    where = " inside the sandbox" if isolation.sandboxed else ""
    return f"the grading worker did not start{where}: {said}; {DOCTOR_ADVICE}"


def first_failure(checks: list, limit: int = 300) -> str:
    """\"case 'n=1023' failed: <its first problem line>\" for the first failed check, or "" when none failed: the
    reason a crashed or timed-out submission's message gives, found before the process died."""
    first = next((c for c in checks if not c["passed"]), None)
    if first is None:
        return ""
    what = checker.first_problem(first["detail"]).strip()
    if len(what) > limit:
        what = what[:limit - 3].rstrip() + "..."
    return f"case {first['name']!r} failed" + (f": {what}" if what else "")


def stack_margin(timeout: float) -> float:
    """How long before the time limit the worker writes its stack (worker._stack_alarm): long enough for the write
    to land before the grader gives up, short enough to be where a hang was at the limit."""
    return min(1.0, max(0.05, 0.05 * timeout))


STACK_BYTES = 64 * 1024  # what is read of the stack a worker wrote (the last of it is kept)
STACK_FRAMES = 5  # frames of the submission shown


def _read_stack(fd: int | None, wait: float = 0.3) -> str:
    """What the worker wrote on its stack pipe (faulthandler's dump at ``stack_at``), read without blocking past
    ``wait`` seconds, at most 4 x STACK_BYTES, of which the last STACK_BYTES are kept. Untrusted text: a submission
    can write anything there (or nothing), so it is only ever shown, never acted on."""
    if fd is None:
        return ""
    data, end = b"", time.monotonic() + wait
    while len(data) < 4 * STACK_BYTES:
        try:
            chunk = os.read(fd, STACK_BYTES)
        except BlockingIOError:
            if data or time.monotonic() >= end:  # a dump comes in one write: what is there is all of it
                break
            time.sleep(0.02)
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data[-STACK_BYTES:].decode("utf-8", errors="replace")


_FRAME_LINE = re.compile(r'\s*File "([^"\n]{1,1024})", line (\d{1,7}) in ([\w<>.]{1,80})\s*')
_FRAME_WORKER = "gpucourse/grading/worker.py"


def _where_it_hung(dump: str, staged: str, given: str) -> list:
    """The innermost frames of the submission in ``dump`` (faulthandler's text: "Thread 0x... (most recent call
    first):" blocks of ``File "...", line N in name``), at most STACK_FRAMES, innermost first, each as
    ``"<given's file name>, line N in name: `code`"``, the code read from the grader's own copy of the submission
    (``staged``), never from the dump. The dump is a submission's to forge: only lines of that form whose file is
    the staged submission's name are read, numbers and names bounded; the thread is the one running the worker's
    main loop (else the first with a frame of the submission)."""
    names = {f"{STAGED_NAME}.py", f"{STAGED_NAME}_notebook.py"}
    threads, current = [], None
    for line in dump.splitlines()[-2000:]:
        m = _FRAME_LINE.fullmatch(line)
        if m is None:
            if line.startswith(("Thread ", "Current thread ")):
                current = []
                threads.append(current)
            continue
        if current is None:
            current = []
            threads.append(current)
        current.append((m.group(1), int(m.group(2)), m.group(3)))
    mine = [t for t in threads if any(os.path.basename(f) in names for f, _, _ in t)]
    if not mine:
        return []
    main = next((t for t in mine if any(f.endswith(_FRAME_WORKER) and fn == "main" for f, _, fn in t)), mine[0])
    lines = _source_lines(staged)
    shown = os.path.basename(given)
    out = []
    for f, n, fn in main:
        if os.path.basename(f) not in names:
            continue
        code = lines[n - 1].strip() if 0 < n <= len(lines) else ""
        code = "".join(ch if ch.isprintable() else "?" for ch in code)[:120]
        out.append(f"{shown}, line {n} in {fn}" + (f": `{code}`" if code else ""))
        if len(out) == STACK_FRAMES:
            break
    return out


def _source_lines(staged: str) -> list:
    """The lines of the program the worker ran: the staged file, or of a notebook the code it made of its cells
    (worker.notebook_source, so line numbers agree); [] when it cannot be read."""
    try:
        if staged.endswith(".ipynb"):
            from .worker import notebook_source

            return notebook_source(staged).splitlines()
        with open(staged, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except Exception:  # noqa: BLE001 - the location is shown without its code
        return []


def _wait_exit(proc) -> int | None:
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _expected(msg: dict, nonce: str, kinds: tuple) -> dict:
    """``msg`` when it is one of ``kinds`` carrying this worker's nonce; else protocol.Malformed. Types are checked
    before values are compared: a forged field may be a tensor, whose ``==`` is not a bool."""
    kind, their_nonce = msg.get("type"), msg.get("nonce")
    if type(their_nonce) is not str or their_nonce != nonce or type(kind) is not str or kind not in kinds:
        shown = kind[:40] if type(kind) is str else type(kind).__name__
        raise protocol.Malformed(f"expected {'/'.join(kinds)}, got {shown!r}")
    return msg


def _check_index(msg: dict, index: int) -> None:
    """A case's reply must name that case by its number (a plain int): else protocol.Malformed (a forged reply)."""
    their = msg.get("index")
    if type(their) is not int or their != index:
        shown = their if type(their) is int else type(their).__name__
        raise protocol.Malformed(f"a reply for case {shown!r} while case {index} ran")


def _error_field(msg: dict):
    """A perf step's "error" field: None or a string; anything else is protocol.Malformed."""
    error = msg.get("error")
    if error is not None and type(error) is not str:
        raise protocol.Malformed(f"perf error is a {type(error).__name__}")
    return error


def _converse(ex, path, result: Result, seed: int, nonce: str, to_w: int, from_r: int, deadline: float,
              lock: gpulock.GpuLock | None = None, replied: list | None = None, doing: list | None = None,
              margin: float = 1.0) -> None:
    """The grading conversation with one worker (``path``: the submission as the worker sees it); fills ``result``.
    On a GPU, ``lock`` is held shared around each case and exclusive around the timing; the time spent waiting for
    it is added to the deadline. ``doing`` gets (kind, name) of each step asked of the worker ("case" and the case's
    name, "perf", "end"): what a timeout interrupted. Every message tells the worker when to write its stack
    (``stack_at``: ``margin`` seconds before the deadline, see worker._stack_alarm). Raises
    protocol.Timeout/Closed/Malformed."""
    doing = doing if doing is not None else []

    def send(msg: dict, step: tuple | None = None) -> None:
        if step is not None:
            doing.append(step)
        protocol.send(to_w, dict(msg, stack_at=float(deadline - margin)), deadline)

    def expect(*kinds) -> dict:
        msg = protocol.recv(from_r, deadline)
        if replied is not None:
            replied.append(True)
        return _expected(msg, nonce, kinds)

    @contextlib.contextmanager
    def gpu_held(exclusive: bool = False):
        nonlocal deadline
        if lock is None:  # CPU mode: no lock to wait for (traced all the same: the case's time is its hold)
            _trace(result.submission, "waited", exclusive=exclusive, seconds=0.0)
            yield
            _trace(result.submission, "released", exclusive=exclusive)
            return
        with (lock.exclusive() if exclusive else lock.shared()) as waited:
            deadline += waited
            _trace(result.submission, "waited", exclusive=exclusive, seconds=round(waited, 4),
                   **({"round": lock.rounds, "gpu": lock.gpu} if exclusive else {}))
            yield
        _trace(result.submission, "released", exclusive=exclusive)

    send({"type": "hello", "nonce": nonce, "exercise": ex.id, "submission": path}, ("load", ""))
    msg = expect("loading", "ready", "load_error")  # "loading": about to read the submission
    if msg["type"] == "loading":
        msg = expect("ready", "load_error")
    _trace(result.submission, "ready")
    if msg["type"] == "load_error":
        result.status, result.score = "error", 0.0
        result.message = str(msg.get("message", "could not be loaded"))[:500]
        result.checks.append({"name": "load", "passed": False, "detail": str(msg.get("traceback", ""))[-5000:]})
        return
    dev_type = "cuda" if _device.on_gpu() else "cpu"
    all_ops: dict = {}
    patched: list = []
    threads: list = []
    # From the first case to the timing's last shared hold, this job is in its cases: a timing of another job waits
    # for that (gpulock's rounds), so its timing stalls no case; this job's own timing waits for the others'.
    with contextlib.ExitStack() as casework:
        if lock is not None:
            casework.enter_context(lock.casework())
        for index, case in enumerate(ex.cases):
            if ex.judge is not None:
                # Judged: the judge runs in the worker (it must watch the call); only its list of problems comes back.
                with gpu_held():
                    send({"type": "judge", "index": index, "params": case.params,
                          "seed": checker.case_seed(seed, index), "nonce": nonce}, ("case", case.name))
                    msg = expect("judged", "raised")
                _check_index(msg, index)
                _note_patched(patched, msg.get("patched"))
                _note_patched(threads, msg.get("threads"))
                if msg["type"] == "raised":
                    _raised(ex, case, msg, result, patched, threads)
                    return
                problems = msg.get("problems")
                if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
                    raise protocol.Malformed("problems are not a list of strings")
                result.checks.append({"name": case.name, "passed": not problems,
                                      "detail": "ok" if not problems else "\n".join(p[:2000] for p in problems[:50])})
                if msg.get("timed_out") is True and problems:  # the judge's deadline passed: the call hung
                    result.status, result.score = "timeout", 0.0
                    result.message = f"{case.name}: {problems[0][:500]}"
                    return
                continue
            case = checker.drawn_case(case, seed, index)  # sizes drawn here: the worker sees only the tensors
            args, expected = checker.make_case(ex, case, seed, index)
            _trace(result.submission, "drawn", case=index)
            with gpu_held():
                send({"type": "case", "index": index, "args": args, "nonce": nonce}, ("case", case.name))
                msg = expect("result", "raised")
            _check_index(msg, index)
            if msg["type"] == "raised":
                forbidden = _forbidden_field(ex, msg)
                if not forbidden:
                    _raised(ex, case, msg, result)
                    return
                # A forbidden op called before the raise: the cheat is the verdict (a failed case, as on the shapes
                # the op takes), and the next cases run.
                exc_type = msg.get("exc_type") if type(msg.get("exc_type")) is str else ""
                raised = checker.exception_line(str(msg.get("traceback", "")), exc_type)[:300] or exc_type[:60]
                result.checks.append({"name": case.name, "passed": False,
                                      "detail": checker.raised_after_forbidden(forbidden, raised)})
                continue
            outcome = _outcome(msg, len(args))
            out = outcome["out"]
            for op, n in outcome["ops"].items():
                all_ops[op] = all_ops.get(op, 0) + n
            verdict = checker.evaluate(ex, case, args, expected, outcome, dev_type)
            problems = _meta_problem(expected, out) or verdict.problems
            passed = verdict.passed and not _meta_problem(expected, out)
            if not passed and checker.drawn_note(ex, case):
                problems = problems + [checker.drawn_note(ex, case)]
            result.checks.append({"name": case.name, "passed": passed,
                                  "detail": "ok" if passed else "\n".join(problems + [f"hint: {h}"
                                                                                      for h in verdict.hints])})
        _flag_patched(result, patched, threads)
        calls = launches.reference_calls(all_ops, ex.reference_ops)
        if calls:
            result.flags.append(f"calls {', '.join(calls)}: the torch op this exercise asks to implement")
        n_pass = sum(c["passed"] for c in result.checks)
        result.score = n_pass / len(result.checks) if result.checks else 0.0
        if n_pass == len(result.checks):
            result.status, result.message = "passed", f"all {n_pass} cases passed"
        else:
            first = next(c for c in result.checks if not c["passed"])
            what = checker.first_problem(first["detail"])
            hint = next((ln.strip() for ln in first["detail"].splitlines() if ln.startswith("hint: ")), "")
            if hint and hint not in what:  # the likely cause, where the checker could name one
                what = f"{what}; {hint[:600]}"
            result.status = "failed"
            result.message = (f"{len(result.checks) - n_pass} of {len(result.checks)} cases failed; first: "
                              f"{first['name']}: {what}")
        if result.status == "passed" and ex.perf is not None and _device.on_gpu():
            # Inputs drawn on the CPU holding no lock, moved and the first call made beside other jobs' cases: only
            # the timing holds the GPU alone, in a round with the other timings waiting then (gpulock).
            send({"type": "perf_draw", "nonce": nonce}, ("perf", "the speed measurement"))
            prep_error = _error_field(expect("perf_drawn"))
            _trace(result.submission, "perf_drawn")
            if not prep_error:
                with gpu_held():
                    send({"type": "perf_prepare", "nonce": nonce})
                    prep_error = _error_field(expect("perf_prepared"))
            casework.close()  # its cases are over: its timing waits for the other jobs' cases
            if prep_error:
                perf = {"error": str(prep_error)}
            else:
                with gpu_held(exclusive=True):
                    send({"type": "perf", "nonce": nonce})
                    perf = expect("perf").get("perf", {})
            if lock is None or lock.problem:
                result.timing = f"beside other jobs ({lock.problem if lock else 'no GPU lock'})"
            else:
                result.timing = (f"alone on GPU {lock.gpu} (no other grading job ran a case or a timing on it "
                                 f"meanwhile)")
            if not isinstance(perf, dict):
                raise protocol.Malformed("perf is not a dict")
            if "error" in perf:
                result.flags.append(f"speed could not be measured: {str(perf['error'])[:200]}")
            elif perf:
                result.perf = _perf_fields(perf, ex.perf.baseline)
                result.message += f"; speed (self-reported by the worker): {str(perf.get('text'))[:300]}"
                if perf.get("suspicious"):
                    result.flags.append("speed above the device's physical limit: " + "; ".join(
                        str(w) for w in perf.get("warnings", []))[:300])
                elif not perf.get("met"):
                    result.flags.append(f"below the speed target: {str(perf.get('text'))[:200]}")
    send({"type": "bye", "nonce": nonce}, ("end", "the worker's exit, after every case (a thread or a finalizer of "
                                                  "the submission?)"))
    expect("done")


PERF_NUMBERS = ("ratio", "target", "ms", "q25_ms", "q75_ms", "pct_of_peak")


def _perf_fields(perf: dict, baseline: str) -> dict:
    """The worker's timing as plain values for the report and the leaderboard: the numbers of PERF_NUMBERS it sent
    (finite floats; others left out: a worker may send anything), ``met`` and ``suspicious`` as booleans, the text
    capped, and ``baseline`` from the exercise here ("copy": a torch copy of the same bytes; else the reference)."""
    out = {"baseline": "a torch copy" if baseline == "copy" else "the reference"}
    for key in PERF_NUMBERS:
        try:
            x = float(perf.get(key))
        except (TypeError, ValueError, OverflowError):
            continue
        if x == x and abs(x) != float("inf"):
            out[key] = x
    out["met"] = perf.get("met") is True
    out["suspicious"] = perf.get("suspicious") is True
    out["text"] = str(perf.get("text"))[:300]
    return out


def _forbidden_field(ex, msg: dict) -> list:
    """The forbidden ops a "raised" message says were called before the raise; only names the exercise forbids
    count (a forged list can only add the exercise's own forbidden names, which makes its verdict worse)."""
    names = msg.get("forbidden")
    if not isinstance(names, list) or not all(type(n) is str for n in names):
        return []
    return launches.reference_calls({n[:200]: 1 for n in names[:20]}, ex.forbidden_ops)


def _raised(ex, case, msg: dict, result: Result, patched: tuple = (), threads: tuple = ()) -> None:
    """The submission raised on ``case`` (or, judged, tampered with what the judge relies on): status error."""
    result.status, result.score = "error", 0.0
    exc_type = msg.get("exc_type") if type(msg.get("exc_type")) is str else ""  # a forged one may be a tensor
    last = checker.exception_line(str(msg.get("traceback", "")), exc_type)[:200]
    if msg.get("tampered") is True and ex.judge is not None:  # the worker's isinstance(exc, judging.Tampered)
        what = f"tampered with the judge ({last.split(': ', 1)[-1]})"
        result.flags.append("tampered with the judge")
    elif msg.get("not_implemented") is True:
        what = checker.NOT_IMPLEMENTED
    else:
        what = f"raised {last or exc_type[:60]}"
    result.message = f"{ex.function} {what} (case {case.name!r})"
    result.checks.append({"name": case.name, "passed": False, "detail": str(msg.get("traceback", ""))[-5000:]})
    _flag_patched(result, patched, threads)


def _note_patched(patched: list, reported) -> None:
    """Collect what the worker had to restore before judging (a list of strings; anything else is ignored)."""
    if isinstance(reported, list):
        for item in reported[:50]:
            if isinstance(item, str) and item[:200] not in patched:
                patched.append(item[:200])


def _flag_patched(result: Result, patched, threads) -> None:
    if patched:
        more = f" and {len(patched) - 8} more" if len(patched) > 8 else ""
        result.flags.append(f"changed what the judge relies on (undone before judging, as reported by the worker): "
                            f"{', '.join(patched[:8])}{more}")
    if threads:
        result.flags.append(f"left threads running beside the judge (as reported by the worker): "
                            f"{', '.join(threads[:5])}")


# ---------------------------------------------------------------------------------------------------------------------


def _gpu_slots(jobs: int) -> list:
    """The CUDA_VISIBLE_DEVICES value for each job slot: one GPU each where there are several, else None."""
    if not _device.on_gpu():
        return [None] * jobs
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [s.strip() for s in visible.split(",") if s.strip()] if visible else \
        [str(i) for i in range(torch.cuda.device_count())]
    if len(ids) <= 1:
        return [None] * jobs
    return [ids[i % len(ids)] for i in range(jobs)]


class _Progress:
    """Progress on stderr as submissions finish (the text report on stdout stays parseable).

    In a log (stderr not a terminal): one line per submission, ``[3/12] alice.py  passed    1.00  (4.2 s)``, with
    the start of the message when it did not pass. On a terminal: the same lines, and under them a bar redrawn in
    place (``[#####.......] 3/12 done, 32 s, about 1 min left``), its clock ticking each second while submissions
    run, cleared when the batch ends. Paths are shown with
    control characters escaped (a file name could carry a terminal escape sequence)."""

    WIDTH = 30

    def __init__(self, total: int, enabled: bool, stream=None):
        self.total, self.done, self.enabled, self.lock = total, 0, enabled, threading.Lock()
        self.closed = False
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and _isatty(self.stream)
        self.t0 = time.monotonic()
        if self.tty and total:
            self.stream.write(self.bar())
            self.stream.flush()
            # the bar's clock ticks while a long submission runs (a class's batch is minutes), until the last one
            threading.Thread(target=self._tick, daemon=True).start()

    TICK_S = 1.0

    def _tick(self) -> None:
        while True:
            time.sleep(self.TICK_S)
            with self.lock:
                if self.done >= self.total or self.closed:
                    return
                self.stream.write("\r\033[K" + self.bar())
                self.stream.flush()

    def close(self) -> None:
        """Stop the clock (the batch is over, or ended early); the last line was written by update()."""
        with self.lock:
            self.closed = True

    def bar(self) -> str:
        filled = self.WIDTH * self.done // max(1, self.total)
        elapsed = time.monotonic() - self.t0
        text = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} done, {elapsed:.0f} s"
        if 0 < self.done < self.total:
            left = elapsed / self.done * (self.total - self.done)
            text += f", about {left:.0f} s left" if left < 90 else f", about {left / 60:.0f} min left"
        elif self.done == 0:
            text = f"grading {self.total} submission{'s' if self.total != 1 else ''}... " + text
        return text

    def update(self, r: Result) -> None:
        from .gradebook import printable

        with self.lock:
            self.done += 1
            if not self.enabled:
                return
            why = ""
            if r.status != "passed":
                why = "  " + printable(r.message if len(r.message) <= 120 else r.message[:117] + "...")
            line = (f"[{self.done:>{len(str(self.total))}}/{self.total}] {printable(r.submission)}  {r.status:<8} "
                    f"{r.score:.2f}  ({r.seconds:.1f} s){why}")
            if self.tty:  # the line replaces the bar, and the bar is drawn again under it until the last one
                self.stream.write("\r\033[K" + line + "\n" + (self.bar() if self.done < self.total else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def environment() -> dict:
    v = _env.versions()
    return dict(v, fingerprint=_env.fingerprint(v))


def _say(text: str) -> None:
    print(f"gpucourse grade: {text}", file=sys.stderr, flush=True)


NOT_FOR_POINTS = ("graded at the process level, without the bubblewrap sandbox: each submission could read "
                  "whatever the grader's user can (the solved workbooks, the instructor's solutions, the other "
                  "submissions), so these results are feedback, not grades: no points, no ranking "
                  "(--allow-process-isolation accepts them; `gpucourse doctor` says how to get the sandbox)")


def standing(isolation: sandbox.Isolation, allow_process_isolation: bool = False) -> dict:
    """Whether a batch's results may be given points and ranked (``for_points``), and why: under bubblewrap yes;
    at the process level only where the instructor accepted it (``--allow-process-isolation``), since a submission
    there can read the solved workbooks and hand in the instructor's answer."""
    if isolation.sandboxed:
        return {"for_points": True, "why": "graded in the bubblewrap sandbox"}
    if allow_process_isolation:
        return {"for_points": True, "why": "graded at the process level, accepted by the instructor "
                                           "(--allow-process-isolation): a submission could read the solved "
                                           "workbooks and the other submissions"}
    return {"for_points": False, "why": NOT_FOR_POINTS}


def grade(ex, paths: list, timeout: float | None = None, jobs: int = 1, progress: bool | None = None,
          isolation: sandbox.Isolation | str | None = None, prebuild_jobs: int | None = None,
          allow_process_isolation: bool = False) -> dict:
    """Grade every path; returns ``{"exercise", "environment", "isolation", "standing", "results"}`` with results in
    the given order; ``standing`` (:func:`standing`) says whether they may be given points and ranked. ``progress``: print a line on stderr as each submission finishes (None: only where stderr is a
    terminal). ``isolation``: an Isolation, or "auto"/"bubblewrap"/"process" (default: $GPUCOURSE_ISOLATION, else
    auto: bubblewrap where it works); the level used is in the report, and said on stderr when it is not the full
    one.

    ``timeout``: seconds per submission (default: :func:`default_timeout`).

    ``jobs`` graded workers run at once. CUDA submissions on a GPU are first compiled by workers that see no GPU
    (:func:`_prebuild`), ``prebuild_jobs`` at once (default: $GPUCOURSE_PREBUILD_JOBS, else ``jobs``), in the order
    given and ahead of the grading slots (at most ``jobs + prebuild_jobs`` submissions prepared and not yet graded): a
    slot that frees finds the next submission compiled, instead of compiling it itself (on the H100 a slot spent 19 s
    of its 46 s there)."""
    timeout = default_timeout() if timeout is None else timeout
    if not isinstance(isolation, sandbox.Isolation):
        isolation = sandbox.detect(isolation)
    if not isolation.sandboxed and (progress or (progress is None and sys.stderr.isatty())):
        print(f"gpucourse grade: isolation: {isolation.detail}", file=sys.stderr, flush=True)
    jobs = max(1, int(jobs))
    compiles = (prebuild_jobs or _prebuild_jobs() or jobs) if _needs_prebuild(ex) else 0
    talk = progress or (progress is None and sys.stderr.isatty())
    # where the installed packages carry no bytecode, compiled once for every worker to read
    pycache.prepare(say=_say if talk else None)
    _threads_per_worker[0] = worker_threads(jobs + compiles)
    if ex.kind == "cuda" and _device.on_gpu():  # built once, before any worker starts; read-only inside sandboxes
        cuda_build.prepare_shared()
        if ex.cuda_binding:  # the exercise's pybind11 module, compiled once; submissions declaring the same link it
            cuda_build.prepare_binding(*ex.cuda_binding)
    slots: queue.Queue = queue.Queue()
    for gpu in _gpu_slots(jobs):
        slots.put(gpu)
    bar = _Progress(len(paths), sys.stderr.isatty() if progress is None else progress)
    ahead = _Ahead(ex, paths, timeout, isolation, compiles, jobs) if compiles else None

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


PREBUILD_JOBS_ENV = "GPUCOURSE_PREBUILD_JOBS"  # how many CUDA compiles run at once ahead of the slots (default --jobs)


def _prebuild_jobs() -> int | None:
    """$GPUCOURSE_PREBUILD_JOBS as a whole number >= 1, None where unset (compiles are CPU work: on a machine with
    few cores per job, fewer at once finish sooner each)."""
    text = os.environ.get(PREBUILD_JOBS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"${PREBUILD_JOBS_ENV}={text!r}: expected a whole number >= 1")
    return int(text)


class _Ahead:
    """The prebuilds of a batch, run by their own pool ahead of the grading slots. :meth:`take` (a slot's call)
    submits the prebuilds up to ``ahead`` submissions beyond the one it takes, in order (the pool runs them in that
    order, so the one a slot waits for is never queued behind later ones), and waits for its own."""

    def __init__(self, ex, paths: list, timeout: float, isolation, workers: int, slots: int):
        self.ex, self.paths, self.timeout, self.isolation = ex, paths, timeout, isolation
        self.ahead = max(1, workers) + max(1, slots)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers))
        self.futures: dict = {}  # index -> Future of Prepared, until a slot takes it
        self.submitted = 0
        self.guard = threading.Lock()
        self._submit(self.ahead)

    def _submit(self, upto: int) -> None:
        with self.guard:
            while self.submitted < min(len(self.paths), upto):
                path = self.paths[self.submitted]
                self.futures[self.submitted] = self.pool.submit(prepare, self.ex, path, self.timeout, self.isolation)
                self.submitted += 1

    def take(self, index: int) -> Prepared:
        self._submit(index + self.ahead)
        with self.guard:
            future = self.futures.pop(index)
        return future.result()

    def close(self) -> None:
        """The batch is over (or stopped): prebuilds not begun are dropped, and what the others prepared deleted."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        with self.guard:
            left, self.futures = list(self.futures.values()), {}
        for future in left:
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().discard()


def write_json(report: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


CSV_COLUMNS = ["submission", "status", "score", "message", "seconds", "flags", "timing", "isolation", "gpu", "driver",
               "torch", "triton", "mode", "fingerprint"]


def write_csv(report: dict, path: str) -> None:
    env = report["environment"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in report["results"]:
            w.writerow({"submission": r["submission"], "status": r["status"], "score": f"{r['score']:.4f}",
                        "message": r["message"], "seconds": r["seconds"], "flags": "; ".join(r["flags"]),
                        "timing": r["timing"], "isolation": report["isolation"]["level"],
                        "gpu": env.get("gpu") or "CPU", "driver": env.get("driver") or "",
                        "torch": env.get("torch"), "triton": env.get("triton") or "", "mode": env.get("mode"),
                        "fingerprint": env.get("fingerprint")})
