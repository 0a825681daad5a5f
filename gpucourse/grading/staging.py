"""Everything before a submission's graded worker (:func:`prepare`): its copy under a fixed name in a private folder
(:func:`stage_submission`, so no path the instructor gave reaches it; :func:`unstaged` puts the given names back in
the report), the flags and the course-code check of its source (flags.py) and, for a CUDA submission on a GPU, its
compile by a worker that sees no GPU (:func:`prebuild`)."""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import time

from .. import cuda_build
from .. import device as _device
from . import checker, protocol, sandbox
from .flags import course_code_used, read_source, static_flags
from .process import MEMORY_MB, build_env, close_fds, kill_group, worker_command
from .progress import trace
from .report import Result
from .session import checked_reply

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


@dataclasses.dataclass
class Prepared:
    """A submission made ready for its graded worker: its staged copy, its private folder (where a CUDA
    submission's prebuild left its extension), the flags of its source, and the seconds spent so far (the
    prebuild: they count against its time limit). ``result``: the final result where it cannot be graded."""
    path: str
    stage: str = ""
    staged: str = ""
    tmp: str = ""
    flags: list[str] = dataclasses.field(default_factory=list)
    course: list[str] = dataclasses.field(default_factory=list)  # where its code imports the lessons (course_code_used)
    seconds: float = 0.0
    result: Result | None = None

    def discard(self) -> None:
        """Delete its folders (a batch that ended before it was graded)."""
        for folder in (self.tmp, self.stage):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)


def needs_prebuild(ex) -> bool:
    """Whether a submission of ``ex`` is compiled ahead by :func:`prebuild`: a CUDA exercise, graded on a GPU."""
    return _device.on_gpu() and ex.kind == "cuda"


def prepare(ex, path: str, timeout: float, isolation: sandbox.Isolation, mem_mb: int = MEMORY_MB) -> Prepared:
    """Everything before a submission's graded worker: the staged copy (:func:`stage_submission`), its source's
    flags, its private folder and, for a CUDA submission on a GPU, its prebuild (:func:`prebuild`: no GPU, no
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
        source = read_source(st.staged)
        st.flags, st.course = static_flags(source), course_code_used(source)
        st.tmp = tempfile.mkdtemp(prefix="gpucourse-grade-")
        trace(path, "start")
        if needs_prebuild(ex):  # compiled first by a worker with no GPU, holding no lock (see prebuild)
            prebuild(ex, st.staged, st.tmp, isolation, t0 + timeout, mem_mb)
            trace(path, "prebuilt")
    except BaseException:
        st.discard()
        raise
    st.seconds = time.monotonic() - t0
    return st


def prebuild(ex, path: str, tmp: str, isolation, deadline: float, mem_mb: int) -> None:
    """Compile a CUDA submission before it is graded, in a worker that sees no GPU and holds no GPU lock.

    A CUDA submission builds its extension inside its first call, some 20 s of compiling. Made in the graded worker,
    that call would hold the GPU's shared lock all that time, and a timing waiting for the exclusive lock holds back
    every other job's cases behind it: on the H100 a batch at --jobs 16 moved in waves and graded 4.3 submissions a
    minute. So a first worker, in the same sandbox but with no GPU device (CPU mode, ``CUDA_VISIBLE_DEVICES`` empty),
    is given the first case's inputs on the CPU; the submission's ``cuda_build.build`` then compiles for the grader's
    GPU (``PREBUILD_ENV``) into the private /tmp the graded worker will share, and finds up to date. Whatever happens
    here (a compile error, a crash, a hang until ``deadline``) is left for the graded worker to meet and report: it
    runs the same code and has what time is left. ``grade`` runs these in a pool of their own, ahead of the grading
    slots (batch.Ahead): in a slot, this compile still made a slot wait 19 s of its 46 s on the H100."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    proc = None
    argv, env, seen_as = worker_command(path, tmp, isolation, None, False, to_r, from_w, mem_mb)
    env.update(build_env(), GPUCOURSE_MODE="cpu", CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1")
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
        if checked_reply(msg, nonce, ("loading", "ready", "load_error"))["type"] == "loading":  # before the submission
            msg = checked_reply(protocol.recv(from_r, deadline), nonce, ("ready", "load_error"))
        if msg["type"] == "ready" and ex.cases:
            seed = checker.new_seed()
            args, _ = checker.make_case(ex, ex.cases[0], seed, 0)
            protocol.send(to_w, {"type": "case", "index": 0, "args": args, "nonce": nonce}, deadline)
            protocol.recv(from_r, deadline)
    except (protocol.Timeout, protocol.Closed, protocol.Malformed, OSError):
        pass
    finally:
        close_fds(to_r, to_w, from_r, from_w)
        if proc is not None:
            kill_group(proc)
