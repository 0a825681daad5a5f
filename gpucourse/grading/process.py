"""A grading worker as an operating-system process: its environment (an allow-list), its command line (in the
sandbox where there is one, under its supervisor), its captured output, how it ended (from its supervisor's report),
killing its process group, and where it was when it hung (the Python stack it wrote just before the time limit).
What each guards against: docs/grading.md."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

from .. import cuda_build
from .. import device as _device
from . import protocol, pycache, sandbox

MEMORY_MB = 6144  # address-space limit per worker in CPU mode (torch + triton alone reserve about 1 GiB)
FSIZE_MB = 256  # largest file a submission may write
OUTPUT_KEEP = 32 * 1024  # bytes of stdout/stderr kept per stream (first and last half)


# The grader's environment variables a worker gets (exact names, or prefixes ending in "_"); nothing else passes.
# Builds need the compilers and CUDA (PATH, CUDA_HOME, CC, LIBRARY_PATH...); the caches are set per worker below.
ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "LC_", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
               "VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_", "NVIDIA_", "CC", "CXX", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS",
               "OMP_NUM_THREADS", "TRITON_")


THREADS_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
threads_per_worker: list = [None]  # set by grader.grade() for its batch: the machine's cores shared among its jobs


def worker_threads(jobs: int) -> int:
    """CPU threads per worker when ``jobs`` run at once: the cores shared among them (at least one). Each worker is
    a torch process whose thread pools default to every core, and a batch of --jobs 16 on 16 cores otherwise runs
    16 x 16 threads whose spinning costs CPU the compiles need (on the H100, 17.4 -> 13.8 s of CPU per CUDA
    submission with one thread each, benchmarks/results/h100-grading-cpu.json)."""
    return max(1, (os.cpu_count() or 1) // max(1, int(jobs)))


def worker_env(gpu: str | None, tmp: str) -> dict:
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
    if threads_per_worker[0] is not None and "OMP_NUM_THREADS" not in os.environ:  # the instructor's, where set
        env.update(dict.fromkeys(THREADS_ENV, str(threads_per_worker[0])))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    env.update(cuda_build.worker_env())  # the read-only precompiled header prepared in grade(), the build layout
    env.update(pycache.worker_env())  # bytecode the grader compiled where the installed packages have none
    return env


def worker_command(path: str, tmp: str, isolation, gpu: str | None, gpu_nodes: bool, to_r: int, from_w: int,
                    mem_mb: int, status_fd: int | None = None, stack_fd: int | None = None) -> tuple:
    """(argv, env, the submission's path as the worker sees it) for a worker on the channel ``to_r``/``from_w``,
    in the sandbox where ``isolation`` has one (with the GPU device nodes bound in when ``gpu_nodes``). With
    ``status_fd``, the worker starts a supervisor that reports there how it ended; in the sandbox, as its PID 1.
    With ``stack_fd``, the worker writes its Python stack there just before the time limit (where_it_hung)."""
    argv = [sys.executable, "-m", "gpucourse.grading.worker", "--rfd", str(to_r), "--wfd", str(from_w),
            "--mem-mb", str(mem_mb), "--fsize-mb", str(FSIZE_MB)]
    if stack_fd is not None:
        argv += ["--stack-fd", str(stack_fd)]
    if status_fd is not None:
        from .worker import supervised

        argv = supervised(argv, status_fd)
    if isolation.sandboxed:
        return (sandbox.command(isolation, argv, tmp, path, gpu_nodes, as_pid_1=status_fd is not None),
                worker_env(gpu, sandbox.INSIDE_TMP), sandbox.inside_path(path))
    return argv, worker_env(gpu, tmp), os.path.abspath(path)


def build_env() -> dict:
    """What both workers of a CUDA submission get, so they compute the same build: the GPU's arch for the course's
    build key and for torch's nvcc flags (a worker that sees no GPU would otherwise build for every arch)."""
    arch = cuda_build.device_arch()
    digits = re.sub(r"\D", "", arch)
    return {cuda_build.ARCH_ENV: arch,
            "TORCH_CUDA_ARCH_LIST": f"{digits[:-1]}.{digits[-1]}" + ("a" if arch.endswith("a") else "")}


class Capped:
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


SIGNAL_CAUSES = {  # what a signal that killed a worker most likely means, where its name does not say
    "SIGKILL": "out of memory, or a kill signal",
    "SIGXCPU": "over its CPU-time limit",
    "SIGXFSZ": "over its file-size limit",
    "SIGBUS": "a bad memory access, e.g. past the end of a mapped file or /dev/shm",
}


def signal_name(code: int, cause: bool = True) -> str:
    """The signal of a negative exit status (-n: killed by signal n), with its likely cause where the name alone
    does not say (SIGNAL_CAUSES; ``cause=False``: the name only): "SIGSEGV", "SIGXCPU (over its CPU-time limit)"."""
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
    return f"{name} ({SIGNAL_CAUSES[name]})" if cause and name in SIGNAL_CAUSES else name


def read_status(fd: int | None) -> dict:
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


def how_it_ended(code: int | None, ended: dict, sandboxed: bool) -> str:
    """The message for a worker that closed the channel before grading finished. ``ended``: its supervisor's report
    (worker.SUPERVISOR), which tells a signal from an exit status for sure. Without a final report (the submission
    killed its supervisor), only the exit status is known: under bubblewrap 128 + n both for a process killed by
    signal n and for one that called exit(128 + n), so the message says both; at the process level, the signal that
    killed the supervisor."""
    if "signal" in ended:
        return f"the process died: killed by {signal_name(-ended['signal'])}"
    if "exit" in ended:
        code = ended["exit"]
    elif code is None:
        return "the process stopped answering and did not exit (it was killed when grading ended)"
    elif ended.get("started"):
        if code < 0:
            return (f"the process ended without saying how: its supervisor was killed by "
                    f"{signal_name(code, False)} (by the submission?)")
        if sandboxed and 128 < code < 128 + 65:
            return (f"the process exited with status {code} (128+{code - 128}: killed by "
                    f"{signal_name(128 - code, False)}, or exit({code})) without saying which: its supervisor was "
                    f"killed first (by the submission?)")
    elif code < 0:  # no supervisor (a worker started without one): Popen's own report
        return f"the process died: killed by {signal_name(code)}"
    return (f"the process exited (code {code}) before grading finished: os._exit(), a fatal error, or a CUDA "
            f"fault")


DOCTOR_ADVICE = ("`gpucourse doctor` checks the sandbox and says how to get it working; `--isolation process` "
                 "grades without it")


def start_failure(isolation, replied: list, code, err_cap, ended: dict) -> str:
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


def close_fds(*fds) -> None:
    """Close the channel's file descriptors that are still open (None: already handed to the worker)."""
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def wait_exit(proc) -> int | None:
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None


def kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def stack_margin(timeout: float) -> float:
    """How long before the time limit the worker writes its stack (worker._stack_alarm): long enough for the write
    to land before the grader gives up, short enough to be where a hang was at the limit."""
    return min(1.0, max(0.05, 0.05 * timeout))


STACK_BYTES = 64 * 1024  # what is read of the stack a worker wrote (the last of it is kept)
STACK_FRAMES = 5  # frames of the submission shown


def read_stack(fd: int | None, wait: float = 0.3) -> str:
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


def where_it_hung(dump: str, staged: str, given: str) -> list:
    """The innermost frames of the submission in ``dump`` (faulthandler's text: "Thread 0x... (most recent call
    first):" blocks of ``File "...", line N in name``), at most STACK_FRAMES, innermost first, each as
    ``"<given's file name>, line N in name: `code`"``, the code read from the grader's own copy of the submission
    (``staged``), never from the dump. The dump is a submission's to forge: only lines of that form whose file is
    the staged submission's name are read, numbers and names bounded; the thread is the one running the worker's
    main loop (else the first with a frame of the submission)."""
    stem = os.path.splitext(os.path.basename(staged))[0]  # staging.STAGED_NAME
    names = {f"{stem}.py", f"{stem}_notebook.py"}
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
