"""The subprocess side of the batch grader: load one submission, run it on the cases the grader sends, send back
what it returned. Run as ``python -m gpucourse.grading.worker --rfd R --wfd W`` by grader.py, never by hand.

The worker knows no seed and no reference: it receives one case's inputs at a time and returns the raw outputs (and
the input buffers, for the canary check); the grader decides. It limits its own resources before anything else runs.
Everything it needs after the submission is loaded (the channel's functions, the nonce, the launch counters) is
bound to local names first, so a submission that monkeypatches modules does not reach them by accident; a
deliberately hostile one can (same process), which is why the grader also scans the source and flags such code.

Judged exercises (``Exercise.judge``) are the exception to "the grader decides": their judge has to watch the call,
so it runs here, through the same :func:`checker.judge_case` as ``gpucourse.check``, on the case's parameters and
seed sent by the grader, and only its list of problems goes back. What it relies on is snapshotted before the
submission is loaded and restored before every case and after every call into the submission; the function it calls
returns plain values only (judging.py). What had to be restored is reported, for the grader to flag; a change found
after a verdict (made while the judge was deciding) turns the case into an error.

How the process ended: under bubblewrap the grader only sees bwrap's exit status, where a worker killed by signal n
and one that called ``os._exit(128 + n)`` look the same. So the grader starts the worker under a supervisor
(:data:`SUPERVISOR`, a few lines of Python that import nothing of the course, and so nothing of torch or CUDA, which
must not be initialised before a fork): it forks, the child execs the worker, and the supervisor waits for it and
writes "signal N" or "exit N" on a status descriptor only it holds, then ends the same way. It is non-dumpable, so
the submission (same user) cannot reach that descriptor through ``/proc/<pid>/fd``, and in the sandbox it is PID 1
(bwrap's ``--as-pid-1``), which no process of the sandbox can kill or stop; at the process level (or with a bwrap
that cannot do that) the submission can kill it, and the grader then says the exit status is ambiguous. The worker
says "loading" before it reads the submission: a worker that died before that ran none of it.
"""
from __future__ import annotations

import argparse
import gc
import os
import re
import resource
import sys
import traceback


# The supervisor: ``python -c SUPERVISOR STATUS_FD WORKER_ARGV...`` (grader._worker_command). Standard library only.
SUPERVISOR = """\
import os, signal, sys
status, argv = int(sys.argv[1]), sys.argv[2:]
os.set_inheritable(status, False)
try:  # non-dumpable: its /proc/<pid>/fd is closed to processes without CAP_SYS_PTRACE (exec resets it for the child)
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
except Exception:
    pass
try:
    os.write(status, b"started\\n")
except OSError:
    pass
pid = os.fork()
if pid == 0:
    os.close(status)
    try:
        os.execv(argv[0], argv)
    finally:
        os._exit(127)
try:  # the channel is the worker's alone: it must close when the worker dies
    fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
except OSError:
    fds = list(range(3, 1024))
for fd in fds:
    if fd > 2 and fd != status:
        try:
            os.close(fd)
        except OSError:
            pass
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:  # as the sandbox's PID 1 it is also every orphan's parent: reaped here until the worker ends
    try:
        done, st = os.waitpid(-1, 0)
    except InterruptedError:
        continue
    except ChildProcessError:
        os._exit(1)
    if done == pid:
        break
sig = os.WTERMSIG(st) if os.WIFSIGNALED(st) else None
code = None if sig is not None else os.WEXITSTATUS(st)
try:
    os.write(status, (f"signal {sig}" if sig is not None else f"exit {code}").encode() + b"\\n")
except OSError:
    pass
if sig is not None:  # the same end, for Popen's returncode at the process level (PID 1 cannot signal itself)
    try:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    os._exit(128 + sig)
os._exit(code)
"""


def supervised(argv: list, status_fd: int) -> list:
    """``argv`` (the worker's command) run under :data:`SUPERVISOR`, which reports on ``status_fd``."""
    return [sys.executable, "-c", SUPERVISOR, str(status_fd), *argv]


def _limit(mem_mb: int, fsize_mb: int, limit_address_space: bool) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    fsize = fsize_mb << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    if limit_address_space and mem_mb > 0:  # CUDA reserves huge virtual ranges: only in CPU mode
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))


_CELL_MAGICS_RUN_BODY = ("%%time", "%%timeit", "%%capture", "%%prun")
_LINE_SKIP = re.compile(r"^(\s*)(?:[%!]|\w+\s*=\s*[%!])")


def _continues_a_statement(code: str) -> bool:
    """Whether the next line of ``code`` continues its last statement: an open bracket, a backslash, an unfinished
    triple-quoted string. Python's tokenizer says so by running out of input inside the statement."""
    import io
    import tokenize

    try:
        for _ in tokenize.generate_tokens(io.StringIO(code).readline):
            pass
    except tokenize.TokenError:
        return True
    except SyntaxError:  # code the fallback cannot read: the line is taken for a magic, as before
        return False
    return False


def submission_source(path: str) -> tuple:
    """(source, filename) of a submission: a .py file as it is; a notebook's code cells as one program
    (:func:`notebook_source`), written beside the current directory as <name>_notebook.py so tracebacks show its
    lines."""
    if path.endswith(".ipynb"):
        source = notebook_source(path)
        filename = os.path.join(os.getcwd(), os.path.splitext(os.path.basename(path))[0] + "_notebook.py")
        with open(filename, "w") as f:
            f.write(source)
        return source, filename
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(), path


def notebook_source(path: str) -> str:
    """The code cells of a notebook as one Python program, turned into Python the way IPython does it
    (``IPython.core.inputtransformer2``): magics and shell lines become ``get_ipython()`` calls, which the worker
    answers with :class:`NoIPython`, and a line that only continues an expression (``% x`` wrapping a string format)
    stays code. Without IPython, a line-based fallback: magics and shell lines become ``pass`` (same indentation);
    ``%%time``-style cell magics run their body, other cell magics are skipped."""
    from ..workbooks import code_cells  # plain JSON: the worker needs no Jupyter packages

    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        TransformerManager = None
    from ..colab import FIRST_LINE  # the generated Colab install cell: never run by a grading worker

    parts = []
    for i, source in enumerate(code_cells(path)):
        if source.lstrip().startswith(FIRST_LINE):
            parts.append(f"# cell {i}: the Colab install cell, skipped\n")
            continue
        if TransformerManager is not None:
            parts.append(f"# cell {i}\n{TransformerManager().transform_cell(source)}\n")
            continue
        lines = source.splitlines()
        if lines and lines[0].lstrip().startswith("%%"):
            if lines[0].split()[0] not in _CELL_MAGICS_RUN_BODY:
                parts.append(f"# cell {i}: skipped {lines[0].split()[0]} cell magic\n")
                continue
            lines = ["pass  # " + lines[0]] + lines[1:]
        out = []
        for line in lines:
            m = _LINE_SKIP.match(line)
            # A `%` or `!` line that continues an open expression (a string format wrapped by a formatter, an
            # operator in brackets) is code, as IPython reads it; only a line that starts a statement is a magic.
            magic = m is not None and not _continues_a_statement("\n".join(out) + "\n")
            out.append(f"{m.group(1)}pass  # skipped: {line.strip()}" if magic else line)
        parts.append(f"# cell {i}\n" + "\n".join(out) + "\n")
    return "\n".join(parts)


class NoIPython:
    """What ``get_ipython()`` returns to a graded notebook: line magics and shell commands do nothing (a grader
    runs no shell), cell magics that only measure or capture (``%%time``, ``%%capture``...) run their body, others
    are skipped."""

    def run_line_magic(self, name, line, _stack_depth=1):
        return None

    def run_cell_magic(self, name, line, cell):
        if f"%%{name}" in _CELL_MAGICS_RUN_BODY:
            caller = sys._getframe(1).f_globals
            exec(compile(cell, caller.get("__file__", "<cell>"), "exec"), caller)
        return None

    def system(self, cmd):
        return None

    def getoutput(self, cmd, split=True):
        return []


def _display(*objs, **_):  # notebooks call display(); outside IPython print is the honest equivalent
    for o in objs:
        print(repr(o))


def _plain(x, torch):
    """A returned value as something the grader can read: plain CPU tensor, number, or a description. A tensor
    without plain values (sparse, nested, meta) is described by what is wrong with it."""
    if isinstance(x, torch.Tensor):
        from .compare import dense_problem

        problem = dense_problem(x)
        if problem is not None:
            return {"other": problem, "type": "Tensor", "problem": problem}
        t = x.detach()
        if type(t) is not torch.Tensor:
            t = t.as_subclass(torch.Tensor)
        return {"tensor": t.to("cpu", copy=True).contiguous(), "device": str(x.device),
                "stride": list(x.stride())}
    if isinstance(x, bool) or x is None:
        return {"other": repr(x)[:200], "type": type(x).__name__}
    if isinstance(x, (int, float)):
        return {"number": float(x)}
    return {"other": repr(x)[:200], "type": type(x).__name__}


def _stack_alarm(fd: int | None):
    """``arm(at)``: have :mod:`faulthandler` write the Python stack of every thread to ``fd`` (the grader's stack
    pipe) at ``at``, a time.monotonic() instant the grader chose just before its time limit (the clock is the
    machine's, the same inside the sandbox); a later call moves it, None leaves it as it is. So a submission over the
    limit is reported with where it was (grader._where_it_hung). faulthandler's watchdog is a C thread: it writes
    while Python code loops or a C call blocks, holding the GIL or not. A submission can cancel or forge this, which
    only changes what the report shows about where it hung (the grader reads it as untrusted text)."""
    import faulthandler
    import time

    later, now = faulthandler.dump_traceback_later, time.monotonic  # bound before the submission runs

    def arm(at) -> None:
        if fd is None or type(at) is not float:
            return
        try:
            later(min(max(at - now(), 0.01), 86400.0), file=fd)
        except (OSError, ValueError, RuntimeError):
            pass

    return arm


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rfd", type=int, required=True)
    ap.add_argument("--wfd", type=int, required=True)
    ap.add_argument("--mem-mb", type=int, default=0)
    ap.add_argument("--fsize-mb", type=int, default=256)
    ap.add_argument("--stack-fd", type=int, default=None)
    args = ap.parse_args(argv)
    gpu_mode = os.environ.get("GPUCOURSE_MODE") == "gpu"
    _limit(args.mem_mb, args.fsize_mb, limit_address_space=not gpu_mode)
    rfd, wfd = args.rfd, args.wfd
    os.set_inheritable(rfd, False)
    os.set_inheritable(wfd, False)
    stack_fd = args.stack_fd
    if stack_fd is not None:
        os.set_inheritable(stack_fd, False)

    import gpucourse  # noqa: F401  (selects the mode and sets TRITON_INTERPRET before triton loads)
    import torch

    from .exercise import JudgeTimeout, get
    from . import checker, launches, protocol

    send, recv, plain = protocol.send, protocol.recv, _plain
    exit_now, flush = os._exit, sys.stdout.flush
    hello = recv(rfd)
    nonce = hello["nonce"]
    arm_stack = _stack_alarm(stack_fd)
    arm_stack(hello.get("stack_at"))  # before the submission's first line: a hang in its import is caught too
    ex = get(hello["exercise"])
    run_case, learner_tb = checker.run_case, checker.learner_traceback
    forbidden_calls = checker.forbidden_before_raise
    draw_perf, prepare_perf, measure_perf = checker.draw_perf, checker.prepare_perf, checker.measure_perf
    drawn = prepared = None
    judge, judge_case = ex.judge, checker.judge_case
    to_device, dev = checker.to_device, gpucourse.torch_device()
    if ex.kind == "triton":
        launches.install()  # before the submission: its kernels are created with the hooks already in place

    def reply(kind: str, **fields) -> None:
        send(wfd, dict(fields, type=kind, nonce=nonce))

    reply("loading")  # nothing of the submission has run before this: a death until here is the grader's failure
    path = hello["submission"]
    try:
        source, filename = submission_source(path)
        code = compile(source, filename, "exec")
    except SyntaxError as exc:
        reply("load_error", message=f"syntax error: {exc.msg} (line {exc.lineno})",
              traceback="".join(traceback.format_exception_only(type(exc), exc)))
        return 0
    except Exception as exc:
        reply("load_error", message=f"could not read the submission: {exc}", traceback="")
        return 0
    module = type(sys)("submission")
    module.__file__ = filename
    module.__dict__["display"] = _display
    module.__dict__["get_ipython"] = NoIPython  # get_ipython().run_line_magic(...): an instance, made per call
    sys.modules["submission"] = module
    if judge is not None:  # taken last, right before the submission's first line runs
        from . import judging

        sealed, Tampered = judging.sealed, judging.Tampered
        pristine = judging.Snapshot()
        import_time = True
        gc.freeze()  # what exists now is never garbage: the collections judging.sealed runs only scan newer objects
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        reply("load_error", message=f"the submission called exit({exc.code!r}) while loading",
              traceback=learner_tb(exc))
        return 0
    except BaseException as exc:  # noqa: BLE001 - anything the submission raises is its error
        reply("load_error", message=f"raised {type(exc).__name__} while loading: {str(exc)[:300]}",
              traceback=learner_tb(exc))
        return 0
    fn = module.__dict__.get(ex.function)
    if not callable(fn):
        reply("load_error", message=f"does not define `{ex.function}` at top level (expected {ex.signature})",
              traceback="")
        return 0
    reply("ready")

    while True:
        msg = recv(rfd)
        arm_stack(msg.get("stack_at"))  # the grader's deadline, moved by its waits for the GPU lock
        if msg.get("type") == "case":
            try:  # the reply is built in here too: reading what the submission returned runs its code
                case_args = to_device(msg["args"], dev)
                outcome = run_case(ex, fn, case_args)
                fields = dict(out=plain(outcome["out"], torch),
                              out2=plain(outcome["out2"], torch) if outcome["out2"] is not None else None,
                              noop_out=plain(outcome["noop_out"], torch) if outcome.get("noop_out") is not None
                              else None,
                              buffers_after=[b.detach().to("cpu", copy=True) if b is not None else None
                                             for b in outcome["buffers_after"]],
                              triton_launches=outcome["triton_launches"], cuda_launches=outcome["cuda_launches"],
                              ops=outcome["ops"], overruns=outcome["overruns"], uses=outcome["uses"],
                              course_launches=outcome["course_launches"],
                              aliasing=outcome["aliasing"],
                              past_end=outcome["past_end"].tolist() if outcome["past_end"] is not None else None)
            except BaseException as exc:  # noqa: BLE001
                flush()
                reply("raised", index=msg["index"], exc_type=type(exc).__name__,
                      not_implemented=isinstance(exc, NotImplementedError), traceback=learner_tb(exc)[-20000:],
                      forbidden=forbidden_calls(exc)[:20])
                continue
            flush()
            reply("result", index=msg["index"], **fields)
        elif msg.get("type") == "judge" and judge is not None:
            patched, threads, timed_out = [], [], False
            try:
                if import_time:  # what the submission changed while it was loaded
                    import_time = False
                    patched += pristine.restore()
                    threads += pristine.new_threads()
                try:
                    problems = judge_case(judge, sealed(fn, patched, threads), msg["params"], msg["seed"])
                except JudgeTimeout as exc:  # the judge's own deadline: the grader's verdict is "timeout"
                    problems, timed_out = [str(exc)], True
                # The judge has undone its own changes (detect() unwraps what it wrapped), and the learner's calls
                # were undone as they returned: a change now was made while the judge decided. No verdict, then.
                during = pristine.restore()
                if during:
                    raise Tampered("what the judge relies on changed while it was deciding (a thread, a hook or a "
                                   "finalizer of the submission?): " + ", ".join(during[:8]))
            except BaseException as exc:  # noqa: BLE001
                flush()
                reply("raised", index=msg["index"], exc_type=type(exc).__name__,
                      not_implemented=isinstance(exc, NotImplementedError), tampered=isinstance(exc, Tampered),
                      traceback=learner_tb(exc)[-20000:], patched=patched[:50], threads=threads[:10])
                continue
            flush()
            problems = [p[:2000] if isinstance(p, str) else p for p in problems[:50]] \
                if isinstance(problems, list) else problems  # what the grader shows; the channel caps a message
            reply("judged", index=msg["index"], problems=problems, patched=patched[:50], threads=threads[:10],
                  timed_out=timed_out)
        elif msg.get("type") == "perf_draw":  # no GPU lock held: CPU work only
            try:
                drawn = draw_perf(ex)
                reply("perf_drawn", error=None)
            except BaseException as exc:  # noqa: BLE001
                drawn = None
                reply("perf_drawn", error=checker.exception_line(learner_tb(exc), type(exc).__name__))
        elif msg.get("type") == "perf_prepare":  # under the GPU's shared lock: inputs moved, fn called once
            try:
                prepared = prepare_perf(ex, fn, drawn)
                drawn = None
                reply("perf_prepared", error=None)
            except BaseException as exc:  # noqa: BLE001
                prepared = None
                reply("perf_prepared", error=checker.exception_line(learner_tb(exc), type(exc).__name__))
        elif msg.get("type") == "perf":  # under the exclusive lock: the timing alone
            try:
                perf = measure_perf(ex, fn, prepared)
            except BaseException as exc:  # noqa: BLE001
                perf = {"error": checker.exception_line(learner_tb(exc), type(exc).__name__)}
            reply("perf", perf=perf)
        else:
            flush()
            reply("done")
            exit_now(0)


if __name__ == "__main__":
    sys.exit(main())
