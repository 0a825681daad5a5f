"""The grader's OS-level isolation (gpucourse/grading/sandbox.py): escapes that need more than a verdict to prove, the
fallback to the process level, and what the sandbox's command line lets a worker see.

The escapes that a verdict proves are known submissions in tests/submissions/escapes/ (test_known_submissions.py).
Here: no process outlives its worker (checked on the host's process table), no network even to the grader's own
loopback, a batch graded after a hostile batch gets the same verdicts and the package on disk is unchanged. These
need the bubblewrap sandbox (without it they would succeed, and harm the checkout) and are skipped, with the
isolation this machine has, where there is none; CI installs bubblewrap, so they run there.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import gpucourse
from gpucourse.grading import gpulock, grader, sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
PACKAGE = os.path.dirname(os.path.abspath(gpucourse.__file__))
VECTOR_ADD = os.path.join(HERE, "submissions", "vector_add")
ESCAPES = os.path.join(HERE, "submissions", "escapes")
ISOLATION = sandbox.detect()
needs_sandbox = pytest.mark.skipif(not ISOLATION.sandboxed, reason=f"needs the bubblewrap sandbox (without it this "
                                                                   f"escape succeeds); here: {ISOLATION.detail}")


def _grade(*args, env=None, timeout=600):
    proc = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", "vector_add", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    return proc


def _report(tmp_path, *paths, name="r.json", env=None, jobs=2):
    out = tmp_path / name
    proc = _grade(*paths, "--jobs", str(jobs), "--timeout", "120", "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text()), proc


def _verdicts(report) -> list:
    return [(os.path.basename(r["submission"]), r["status"], r["message"]) for r in report["results"]]


def _submission(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


RIGHT_KERNEL = open(os.path.join(VECTOR_ADD, "right_basic.py")).read()


# ---------------------------------------------------------------------------------------------------------------------
# What the sandbox shows a worker (no bwrap needed: the command line is built, not run).


def test_the_sandbox_shows_the_package_but_not_the_checkout_around_it(tmp_path):
    sub = tmp_path / "alice.py"
    sub.write_text("")
    iso = sandbox.Isolation("bubblewrap", "", "/usr/bin/bwrap", True, True)
    cmd = sandbox.command(iso, ["python", "-m", "gpucourse.grading.worker"], str(tmp_path / "w"), str(sub), False)
    sep = cmd.index("--")
    binds = [(cmd[i], cmd[i + 1], cmd[i + 2]) for i in range(sep) if cmd[i] in ("--bind", "--ro-bind", "--dev-bind")]
    sources = {src for _, src, _ in binds}
    assert PACKAGE in sources or os.path.realpath(PACKAGE) in sources
    for src in sources:  # nothing of the checkout but the package (and a virtual environment kept inside it)
        if os.path.commonpath([src, CHECKOUT]) == CHECKOUT:
            assert src.startswith((PACKAGE, os.path.join(CHECKOUT, ".venv"))), src
        assert os.path.commonpath([src, CHECKOUT]) != src, f"{src} would show the whole checkout"
    for folder in ("solutions", "exercises", "notebooks", "tests"):
        assert not any(src.startswith(os.path.join(CHECKOUT, folder)) for src in sources), folder
    writable = [(src, dest) for kind, src, dest in binds if kind == "--bind"]
    assert writable == [(str(tmp_path / "w"), "/tmp")]  # the only writable place
    assert ("--ro-bind", str(sub), "/submission/alice.py") in binds  # only its own submission, read-only
    for option in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--disable-userns"):
        assert option in cmd[:sep]
    assert cmd[cmd.index("--uid") + 1] != "0" and cmd[cmd.index("--remount-ro") + 1] == "/"
    assert not any(a.startswith("/dev/nvidia") for a in cmd[:sep])  # device nodes only when grading on a GPU


def test_gpu_grading_binds_the_nvidia_device_nodes(monkeypatch, tmp_path):
    """Untested on a GPU from here: the nodes that exist are bound read-write, /sys read-only."""
    monkeypatch.setattr(sandbox.glob, "glob", lambda p: {"/dev/nvidia[0-9]*": ["/dev/nvidia0"],
                                                         "/dev/nvidiactl": ["/dev/nvidiactl"],
                                                         "/dev/nvidia-uvm": ["/dev/nvidia-uvm"]}.get(p, []))
    iso = sandbox.Isolation("bubblewrap", "", "/usr/bin/bwrap", True, False)
    cmd = sandbox.command(iso, ["python"], str(tmp_path), None, True)
    for node in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"):
        i = cmd.index(node)
        assert cmd[i - 1] == "--dev-bind" and cmd[i + 1] == node
    assert cmd.index("--dev-bind") > cmd.index("--dev")  # after the minimal /dev is mounted
    assert "--disable-userns" not in cmd


def test_isolation_is_asked_for_by_name():
    assert sandbox.requested("process") == "process"
    with pytest.raises(ValueError, match="choose one of auto, bubblewrap, process"):
        sandbox.requested("docker")
    assert sandbox.detect("process").level == "process" and "forced" in sandbox.detect("process").detail


# ---------------------------------------------------------------------------------------------------------------------
# The fallback: grading still works without bubblewrap, and says so.


def test_without_bubblewrap_the_grader_grades_at_the_process_level_and_says_so(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no bwrap on PATH (the worker is started by absolute path)
    env.pop(sandbox.ENV_VAR, None)
    report, proc = _report(tmp_path, os.path.join(VECTOR_ADD, "right_basic.py"),
                           os.path.join(VECTOR_ADD, "wrong_nan.py"), env=env)
    assert report["isolation"]["level"] == "process"
    assert "bubblewrap is not installed" in report["isolation"]["detail"] and "apt-get install bubblewrap" in \
        report["isolation"]["detail"]
    assert "isolation: process level only" in proc.stderr and "isolation: process)" in proc.stdout
    assert [r["status"] for r in report["results"]] == ["passed", "failed"]
    # Feedback, not grades (issue 39): a submission there could read the solved workbooks.
    assert report["standing"] == {"for_points": False, "why": grader.NOT_FOR_POINTS}
    assert "not for points or ranking: graded at the process level" in proc.stdout
    required = _grade(os.path.join(VECTOR_ADD, "right_basic.py"), "--isolation", "bubblewrap", env=env)
    assert required.returncode == 2 and "bubblewrap isolation was required but is not available" in required.stderr


def test_process_level_gives_no_points_or_ranking_unless_the_instructor_allows_it(tmp_path):
    """Issue 39: under process isolation a submission can read the solved workbooks, so --gradebook and
    --leaderboard are refused, saying why, until --allow-process-isolation accepts it; the report says which."""
    env = dict(os.environ, **{sandbox.ENV_VAR: "process"})
    right = os.path.join(VECTOR_ADD, "right_basic.py")
    refused = _grade(right, "--gradebook", str(tmp_path / "g.csv"), env=env)
    assert refused.returncode == 2 and not (tmp_path / "g.csv").exists()
    assert "no --gradebook or --leaderboard: graded at the process level" in refused.stderr
    assert "could read whatever the grader's user can (the solved workbooks" in refused.stderr
    refused = _grade(right, "--leaderboard", str(tmp_path / "b.md"), env=env)
    assert refused.returncode == 2 and "--allow-process-isolation accepts them" in refused.stderr
    out = tmp_path / "r.json"
    proc = _grade(right, "--json", str(out), "--gradebook", str(tmp_path / "g.csv"), "--allow-process-isolation",
                  env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["standing"]["for_points"] is True and "--allow-process-isolation" in report["standing"]["why"]
    assert (tmp_path / "g.csv").exists() and "not for points" not in proc.stdout


def test_process_level_can_be_forced_for_debugging(tmp_path):
    env = dict(os.environ, **{sandbox.ENV_VAR: "process"})
    report, proc = _report(tmp_path, os.path.join(VECTOR_ADD, "right_basic.py"),
                           os.path.join(VECTOR_ADD, "right_notebook_percent_continuation.ipynb"), env=env)
    assert report["isolation"]["level"] == "process" and "forced" in report["isolation"]["detail"]
    assert [r["status"] for r in report["results"]] == ["passed", "passed"]
    assert "isolation: process level only, forced" in proc.stderr


# ---------------------------------------------------------------------------------------------------------------------
# Escapes that need the sandbox.


@needs_sandbox
def test_a_daemon_does_not_outlive_its_worker(tmp_path):
    """A setsid + double-fork daemon (exec'd into a long sleep, so the host's process table can find it by a marker)
    dies with its worker: none is left after grading, and the submissions graded after it pass."""
    marker = f"gpucourse-daemon-marker-{os.getpid()}-{time.time_ns()}"
    daemon = _submission(tmp_path, "daemon.py", RIGHT_KERNEL + textwrap.dedent(f"""
        import os, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", {marker!r}])
            os._exit(0)
        """))
    right = os.path.join(VECTOR_ADD, "right_basic.py")
    try:
        report, _ = _report(tmp_path, daemon, right, right, jobs=1)
        assert [r["status"] for r in report["results"]] == ["passed", "passed", "passed"], _verdicts(report)
        time.sleep(0.5)
        assert not _processes_with(marker), "a daemon outlived its worker"
    finally:
        for pid in _processes_with(marker):  # only if the sandbox failed: leave nothing behind
            os.kill(pid, 9)


@needs_sandbox
def test_no_student_name_or_instructor_path_reaches_the_submission(tmp_path):
    """A submission at an nbgrader-like path naming the student looks for that name in /proc/self/mountinfo, the
    sandbox's command lines, its __file__, argv, a traceback, the environment and the worker's frames
    (tests/submissions/escapes/escape_read_host_paths.py, with the planted name as its marker): it finds nothing and
    passes; the report names it by the path given."""
    marker = f"student-alice-{os.getpid()}-{time.time_ns()}"
    folder = tmp_path / "course" / "submitted" / marker / "ps1"
    folder.mkdir(parents=True)
    source = open(os.path.join(ESCAPES, "escape_read_host_paths.py")).read()
    planted = re.sub(r"(?m)^MARKERS = .*$", f"MARKERS = ({marker[::-1]!r}[::-1],)", source)
    assert planted != source and marker not in planted
    path = folder / f"{marker}.py"
    path.write_text(planted)
    report, _ = _report(tmp_path, str(path))
    (r,) = report["results"]
    assert (r["submission"], r["status"], r["message"]) == (str(path), "passed", "all 6 cases passed"), r


def test_the_sandbox_binds_a_staged_copy_under_a_fixed_name(tmp_path):
    """What the grader binds: the staged copy (a private folder, submission.py or .ipynb), never the path given."""
    from gpucourse.grading import grader

    given = tmp_path / "submitted" / "alice" / "ps1" / "alice_answer.ipynb"
    given.parent.mkdir(parents=True)
    given.write_text("{}")
    stage = tmp_path / "stage"
    stage.mkdir()
    staged = grader.stage_submission(str(given), str(stage))
    assert staged == str(stage / "submission.ipynb") and open(staged).read() == "{}"
    assert not os.access(staged, os.W_OK) or os.geteuid() == 0  # read-only (root writes anyway)
    iso = sandbox.Isolation("bubblewrap", "", "/usr/bin/bwrap", True, True)
    cmd = sandbox.command(iso, ["python"], str(tmp_path / "w"), staged, False)
    assert cmd[cmd.index("/submission/submission.ipynb") - 2:][:2] == ["--ro-bind", staged]
    assert not any("alice" in a for a in cmd)
    with pytest.raises(IsADirectoryError):  # a folder given as a file: the grader says it could not read it
        grader.stage_submission(str(given.parent), str(stage))


def _processes_with(marker: str) -> list:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(int(pid))
        except OSError:
            pass
    return found


@needs_sandbox
def test_no_network_not_even_the_graders_loopback(tmp_path):
    """A server listening on the grader's 127.0.0.1 is out of reach: the sandbox's loopback is its own."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []

    def accept():
        end = time.monotonic() + 60
        while time.monotonic() < end and not accepted:
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    caller = _submission(tmp_path, "caller.py", f"""
        import socket
        socket.create_connection(("127.0.0.1", {port}), timeout=5).sendall(b"my answers")
        vector_add = None
        """)
    try:
        report, _ = _report(tmp_path, caller)
    finally:
        accepted.append(None)
        thread.join(timeout=5)
        server.close()
    (r,) = report["results"]
    assert r["status"] == "error" and "raised ConnectionRefusedError while loading" in r["message"], r
    assert accepted == [None]  # nothing connected


def _tree(folder: str) -> dict:
    """Every file under ``folder`` with its size and mtime (what a planted or rewritten file changes)."""
    state = {}
    for root, _, files in os.walk(folder):
        for f in files:
            st = os.stat(os.path.join(root, f))
            state[os.path.join(root, f)] = (st.st_size, st.st_mtime_ns)
    return state


@needs_sandbox
def test_a_batch_after_a_hostile_batch_gets_the_same_verdicts(tmp_path):
    """A batch, a hostile batch (plants a .pyc for the exercise's spec in the package, writes into torch's folder,
    its own file, wherever it can), then the first batch again in a fresh grader process: the same verdicts as
    before, and the package on disk unchanged."""
    batch = [os.path.join(VECTOR_ADD, f) for f in ("right_basic.py", "wrong_nan.py", "wrong_unwritten_tail.py",
                                                   "right_notebook_magics_plot.ipynb")]
    scribbler = _submission(tmp_path, "scribbler.py", """
        import os, sys
        import gpucourse, torch
        written = []
        for folder in (os.path.dirname(gpucourse.__file__), os.path.dirname(torch.__file__), sys.prefix, "/usr/lib",
                       "/etc", os.path.expanduser("~"), "/tmp", "/dev/shm", os.path.dirname(__file__)):
            try:
                with open(os.path.join(folder, "planted.py"), "w") as f:
                    f.write("x = 1\\n")
                written.append(folder)
            except OSError:
                pass
        raise RuntimeError(f"wrote into {written}")
        """)
    import torch

    spec_pyc = importlib.util.cache_from_source(os.path.join(PACKAGE, "lessons", "l05_triton", "exercises",
                                                             "vector_add.py"))
    pyc_before, hostile_tree = _state(spec_pyc), _tree(ESCAPES)
    before, _ = _report(tmp_path, *batch, name="before.json")
    hostile, _ = _report(tmp_path, os.path.join(ESCAPES, "escape_write_package.py"), scribbler, name="hostile.json")
    after, _ = _report(tmp_path, *batch, name="after.json")
    assert [(s, m) for _, s, m in _verdicts(before)] == [("passed", "all 6 cases passed")] + \
        [(s, m) for _, s, m in _verdicts(before)][1:3] + [("passed", "all 6 cases passed")]
    # The same verdicts; the numbers in a message may differ, since each run draws its own case sizes.
    same = lambda vs: [(f, st, re.sub(r"\d+", "N", m)) for f, st, m in vs]  # noqa: E731
    assert same(_verdicts(after)) == same(_verdicts(before))
    planted, scribbled = hostile["results"]
    assert planted["status"] == "error" and "Read-only file system" in planted["message"], planted
    # Only its private /tmp (also its HOME; deleted afterwards) and the sandbox's own small /dev/shm were writable.
    assert scribbled["message"] == "raised RuntimeError while loading: wrote into ['/tmp', '/tmp', '/dev/shm']", \
        scribbled
    assert _state(spec_pyc) == pyc_before and _tree(ESCAPES) == hostile_tree
    for folder in (PACKAGE, os.path.dirname(torch.__file__), sys.prefix):  # (others edit the package meanwhile)
        assert not os.path.exists(os.path.join(folder, "planted.py"))


def _state(path: str):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


# ---------------------------------------------------------------------------------------------------------------------
# The per-GPU lock around the timed step (CPU-testable: it is a pair of flock'd files).


def test_a_timing_waits_for_running_cases_and_holds_new_ones_back(tmp_path):
    lock = gpulock.GpuLock("0", folder=str(tmp_path))
    events = []
    case_running = threading.Event()
    timing_waiting = threading.Event()

    def case(name, hold):
        with lock.shared():
            events.append(f"{name} start")
            case_running.set()
            time.sleep(hold)
            events.append(f"{name} end")

    def timing():
        case_running.wait()
        timing_waiting.set()
        with lock.exclusive() as waited:
            events.append(f"timing start (waited {waited > 0.1})")
            time.sleep(0.3)
            events.append("timing end")

    first = threading.Thread(target=case, args=("case1", 0.5))
    timer = threading.Thread(target=timing)
    first.start()
    timer.start()
    timing_waiting.wait()
    time.sleep(0.1)  # the timing is now waiting for case1
    second = threading.Thread(target=case, args=("case2", 0.0))
    second.start()
    for t in (first, timer, second):
        t.join(timeout=10)
    assert events == ["case1 start", "case1 end", "timing start (waited True)", "timing end", "case2 start",
                      "case2 end"], events


class _Clock:
    """What ran on the GPU when, from the test's threads: (what, start, end) triples, seconds since the start."""

    def __init__(self):
        self.t0, self.spans, self.guard = time.monotonic(), [], threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    @contextlib.contextmanager
    def span(self, what: str, seconds: float):
        start = self.now()
        time.sleep(seconds)
        yield
        with self.guard:
            self.spans.append((what, start, self.now()))

    def overlapping(self, a: str, b: str) -> list:
        """Pairs of spans, one named starting with ``a`` and one with ``b``, that overlap in time."""
        return [(x, y) for x in self.spans for y in self.spans if x[0].startswith(a) and y[0].startswith(b) and
                x is not y and x[1] < y[2] and y[1] < x[2]]


def test_timings_wait_for_the_graders_cases_and_then_go_in_one_round(tmp_path):
    """Issue 17's lock convoy: a timing that took the GPU as soon as it asked shut out every other job's next case
    until the running ones drained, once per timing. Now the timings of three jobs that finished their cases wait
    (within the patience) until the last job still in its cases (casework) is done, and then run one after the
    other in a single exclusive hold (one round): that job's cases never waited, and no case overlaps a timing."""
    lock = gpulock.GpuLock("0", folder=str(tmp_path), patience=30.0)
    clock = _Clock()
    waits = {}
    slow_started = threading.Event()

    def slow_job():  # still in its cases while the others want their timings
        with lock.casework():
            slow_started.set()
            for i in range(6):
                with lock.shared() as waited:
                    waits[f"case {i}"] = waited
                    with clock.span(f"case {i}", 0.1):
                        pass
                time.sleep(0.02)  # the grader draws the next case holding nothing
        with lock.exclusive():
            with clock.span("timing slow", 0.05):
                pass

    def quick_job(name):
        slow_started.wait()
        with lock.casework():
            with lock.shared():
                with clock.span(f"case {name}", 0.02):
                    pass
        with lock.exclusive():
            with clock.span(f"timing {name}", 0.05):
                pass

    threads = [threading.Thread(target=slow_job)] + [threading.Thread(target=quick_job, args=(n,)) for n in "abc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not clock.overlapping("case", "timing") and not clock.overlapping("timing", "timing"), clock.spans
    last_case = max(end for what, _, end in clock.spans if what.startswith("case"))
    first_timing = min(start for what, start, _ in clock.spans if what.startswith("timing"))
    assert first_timing >= last_case, clock.spans
    assert max(waits.values()) < 0.05, waits  # the slow job's cases were never held back by a timing
    assert lock.rounds == 1  # four timings, one exclusive hold
    with lock.exclusive() as waited:  # let go when the round ended
        assert waited < 1.0 and lock.rounds == 2


def test_a_timing_waits_for_other_jobs_cases_no_longer_than_its_patience(tmp_path):
    """A job that stays in its cases (a slow submission, one that hangs until its time limit) delays a timing by
    the patience at most; the timing then shuts new cases out and waits only for the running one, as before."""
    lock = gpulock.GpuLock("0", folder=str(tmp_path), patience=0.3)
    clock = _Clock()
    done = threading.Event()

    def endless_cases():
        with lock.casework():
            while not done.is_set():
                with lock.shared():
                    with clock.span("case", 0.05):
                        pass
                time.sleep(0.01)

    worker = threading.Thread(target=endless_cases)
    worker.start()
    try:
        time.sleep(0.1)
        with lock.exclusive() as waited:
            with clock.span("timing", 0.1):
                pass
    finally:
        done.set()
        worker.join(timeout=10)
    assert 0.3 <= waited < 2.0, waited
    assert not clock.overlapping("case", "timing"), clock.spans


def test_a_round_shuts_out_another_graders_cases(tmp_path):
    """The rounds are one grader's; the flocks still serialise every grader on the machine: another grader's case
    (a second lock object on the same files) asked for during a round runs after it, not between its timings."""
    mine, theirs = (gpulock.GpuLock("3", folder=str(tmp_path)) for _ in range(2))
    clock = _Clock()
    in_round = threading.Event()

    def timing(name):
        with mine.exclusive():
            in_round.set()
            with clock.span(f"timing {name}", 0.15):
                pass

    def their_case():
        in_round.wait()
        with theirs.shared():
            with clock.span("case theirs", 0.01):
                pass

    threads = [threading.Thread(target=timing, args=(n,)) for n in "ab"] + [threading.Thread(target=their_case)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    case = next(s for s in clock.spans if s[0] == "case theirs")
    assert all(case[1] >= s[2] for s in clock.spans if s[0].startswith("timing")), clock.spans
    assert mine.rounds == 1


def test_one_lock_object_per_gpu_in_a_grader(tmp_path):
    """Every job of a grader on GPU n uses the same lock object (its rounds live there); other GPUs have their own."""
    assert gpulock.for_gpu("0", str(tmp_path)) is gpulock.for_gpu("0", str(tmp_path))
    assert gpulock.for_gpu("1", str(tmp_path)) is not gpulock.for_gpu("0", str(tmp_path))


def test_an_unopenable_lock_folder_is_said_not_hidden(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    lock = gpulock.GpuLock("1", folder=str(blocker / "locks"))
    assert lock.problem and "could not be opened" in lock.problem
    with lock.exclusive() as waited:
        assert waited == 0.0


# ---------------------------------------------------------------------------------------------------------------------
# The install step (scripts/bootstrap.py, run by `make install` and CI), against a fake apt-get: it never fails.


def _bootstrap(tmp_path, apt_rc: int):
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "apt.log"
    (fake / "apt-get").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {log}
        case "$1" in install) [ {apt_rc} = 0 ] && printf '#!/bin/sh\\n' > {fake}/bwrap && /bin/chmod +x {fake}/bwrap;;
        esac
        exit {apt_rc}
        """))
    (fake / "apt-get").chmod(0o755)
    proc = subprocess.run([sys.executable, os.path.join(CHECKOUT, "scripts", "bootstrap.py"), "--only-bubblewrap"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, PATH=str(fake)))
    return proc, log.read_text() if log.exists() else ""


def test_bootstrap_installs_bubblewrap_as_root_and_prints_the_command_otherwise(tmp_path):
    proc, apt = _bootstrap(tmp_path, apt_rc=0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if os.geteuid() == 0:
        assert apt.splitlines()[0].startswith("install -y") and "bubblewrap" in apt
        assert "installing bubblewrap" in proc.stdout
    else:
        assert apt == "" and "sudo apt-get install bubblewrap" in proc.stdout


def test_bootstrap_never_fails_when_bubblewrap_cannot_be_installed(tmp_path):
    proc, apt = _bootstrap(tmp_path, apt_rc=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "process level only" in proc.stdout and "sudo apt-get install bubblewrap" in proc.stdout
    if os.geteuid() == 0:  # install, then the package lists, then install again
        assert [line.split()[0] for line in apt.splitlines()] == ["install", "update", "install"]


# ---------------------------------------------------------------------------------------------------------------------
# The grader's side: a sandbox that does not start is the grader's failure, said as such; the GPU lock is released.


def test_a_sandbox_that_does_not_start_is_an_internal_grader_error_not_the_submissions(tmp_path):
    from gpucourse.grading import grader
    from gpucourse.grading.exercise import get

    fake = tmp_path / "bwrap"
    fake.write_text('#!/bin/sh\n'
                    'echo "bwrap: Can\'t mount proc on /newroot/proc: Operation not permitted" >&2\nexit 1\n')
    fake.chmod(0o755)
    iso = sandbox.Isolation("bubblewrap", "", str(fake), True, False)
    r = grader.grade_one(get("vector_add"), os.path.join(VECTOR_ADD, "right_basic.py"), 60, isolation=iso)
    assert r.status == "error" and r.score == 0.0 and "internal grader error" in r.flags
    assert r.message == ("INTERNAL GRADER ERROR (not the submission's fault): the sandbox did not start: bwrap: "
                         "Can't mount proc on /newroot/proc: Operation not permitted; to fix: " + sandbox.USERNS_HINT +
                         "; " + grader.DOCTOR_ADVICE)
    assert "gpucourse doctor" in grader.DOCTOR_ADVICE


@needs_sandbox
def test_a_bind_source_that_vanished_is_the_graders_failure_with_bwraps_own_line(monkeypatch, tmp_path):
    """The real bwrap, refusing to start: a folder it must bind (here one added to the Python folders) is missing.
    The message is bwrap's own first line and the doctor's advice, not "crashed"; the CLI exits 1."""
    from gpucourse.grading import grader
    from gpucourse.grading.exercise import get

    missing = str(tmp_path / "vanished-site-packages")
    monkeypatch.setattr(sandbox, "_python_dirs", lambda: (missing,))
    r = grader.grade_one(get("vector_add"), os.path.join(VECTOR_ADD, "right_basic.py"), 60, isolation=ISOLATION)
    assert r.status == "error" and "internal grader error" in r.flags
    assert r.message.startswith("INTERNAL GRADER ERROR (not the submission's fault): the sandbox did not start: "
                                f"bwrap: Can't find source path {missing}: No such file or directory; to fix: a "
                                f"folder the grader binds into the sandbox is gone"), r.message
    assert r.message.endswith(grader.DOCTOR_ADVICE)


def test_an_older_bwrap_without_an_option_is_told_to_upgrade(tmp_path):
    """A bwrap that lacks an option the grader gives it (bwrap's own line names it) gets that advice."""
    from gpucourse.grading import grader
    from gpucourse.grading.exercise import get

    fake = tmp_path / "bwrap"
    fake.write_text('#!/bin/sh\necho "bwrap: Unknown option --as-pid-1" >&2\nexit 1\n')
    fake.chmod(0o755)
    iso = sandbox.Isolation("bubblewrap", "", str(fake), True, False)
    r = grader.grade_one(get("vector_add"), os.path.join(VECTOR_ADD, "right_basic.py"), 60, isolation=iso)
    assert (r.status, r.flags[-1]) == ("error", "internal grader error")
    assert r.message == ("INTERNAL GRADER ERROR (not the submission's fault): the sandbox did not start: bwrap: "
                         "Unknown option --as-pid-1; to fix: this bwrap is older than an option the grader gives it: "
                         "install a newer bubblewrap; " + grader.DOCTOR_ADVICE)


def test_a_worker_that_cannot_start_is_the_graders_failure(monkeypatch):
    """A worker that dies before it says "loading" (an interpreter that cannot import the course, say) has run no
    code of the submission: its last stderr line, as a grader error, though its supervisor started."""
    from gpucourse.grading import grader, worker
    from gpucourse.grading.exercise import get

    def broken(path, tmp, isolation, gpu, gpu_nodes, to_r, from_w, mem_mb, status_fd, stack_fd):
        fails = [sys.executable, "-c", "import sys; sys.stderr.write('Traceback ...\\nModuleNotFoundError: No "
                                       "module named gpucourse\\n'); sys.exit(1)"]
        return worker.supervised(fails, status_fd), dict(os.environ), path

    monkeypatch.setattr(grader, "_worker_command", broken)
    iso = sandbox.detect("process")
    r = grader.grade_one(get("vector_add"), os.path.join(VECTOR_ADD, "right_basic.py"), 60, isolation=iso)
    assert r.status == "error" and "internal grader error" in r.flags
    assert r.message == ("INTERNAL GRADER ERROR (not the submission's fault): the grading worker did not start: "
                         "ModuleNotFoundError: No module named gpucourse; " + grader.DOCTOR_ADVICE)


def test_the_gpu_lock_is_held_around_a_case_and_released_when_the_worker_gives_up(tmp_path):
    """_converse holds the lock shared while a case runs (a timing elsewhere waits) and lets it go when the
    conversation ends, however it ends."""
    from gpucourse.grading import checker, grader, protocol
    from gpucourse.grading.exercise import get

    lock = gpulock.GpuLock("7", folder=str(tmp_path))
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    held_during_case = []

    def fake_worker():
        nonce = protocol.recv(to_r)["nonce"]
        protocol.send(from_w, {"type": "ready", "nonce": nonce})
        case = protocol.recv(to_r)
        probe = os.open(lock.paths[1], os.O_RDWR)
        try:
            import fcntl

            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held_during_case.append(False)
        except BlockingIOError:
            held_during_case.append(True)  # the grader holds it (shared) while the case runs
        finally:
            os.close(probe)
        protocol.send(from_w, {"type": "raised", "nonce": nonce, "index": case["index"], "exc_type": "ValueError",
                               "traceback": "ValueError: no"})

    thread = threading.Thread(target=fake_worker, daemon=True)
    thread.start()
    result = grader.Result(submission="s.py", status="error", score=0.0, message="")
    try:
        grader._converse(get("vector_add"), "s.py", result, checker.new_seed(), "n0nce", to_w, from_r,
                         time.monotonic() + 60, lock)
    finally:
        thread.join(timeout=10)
        for fd in (to_r, to_w, from_r, from_w):
            os.close(fd)
    assert held_during_case == [True] and result.status == "error"
    with lock.exclusive() as waited:  # released
        assert waited < 1.0


def _fake_gpu_worker(to_r: int, from_w: int, clock, name: str, case_s: float, start_s: float = 0.0) -> None:
    """A worker of a passing GPU submission, made by hand: every case right (the grader's evaluate is stubbed), a
    timing; what it ran when goes on ``clock``."""
    import torch

    from gpucourse.grading import protocol

    nonce = protocol.recv(to_r)["nonce"]
    time.sleep(start_s)
    protocol.send(from_w, {"type": "ready", "nonce": nonce})
    while True:
        msg = protocol.recv(to_r)
        kind = msg["type"]
        if kind == "case":
            with clock.span(f"case {name}{msg['index']}", case_s):
                pass
            protocol.send(from_w, {"type": "result", "nonce": nonce, "index": msg["index"],
                                   "out": {"tensor": torch.zeros(())}, "buffers_after": [None] * len(msg["args"])})
        elif kind == "perf_draw":
            protocol.send(from_w, {"type": "perf_drawn", "nonce": nonce, "error": None})
        elif kind == "perf_prepare":
            with clock.span(f"case {name} perf_prepare", case_s):
                pass
            protocol.send(from_w, {"type": "perf_prepared", "nonce": nonce, "error": None})
        elif kind == "perf":
            with clock.span(f"timing {name}", 0.05):
                pass
            protocol.send(from_w, {"type": "perf", "nonce": nonce, "perf": {"ratio": 1.0, "met": True, "text": "ok"}})
        else:
            protocol.send(from_w, {"type": "done", "nonce": nonce})
            return


def test_the_grader_times_a_job_after_the_other_jobs_cases_not_between_them(tmp_path, monkeypatch):
    """Two jobs graded at once on one GPU (_converse, fake workers): A passes its cases quickly, B is slower. A's
    timing waits until B's cases (and B's timing's preparation) are over, then both timings run in one round; no
    case runs during a timing, and none of B's cases waited for the lock (read from the trace). Without the jobs'
    casework, A's timing took the GPU between B's cases and held B's next case back."""
    import dataclasses

    from gpucourse.grading import checker, grader
    from gpucourse.grading.exercise import get

    monkeypatch.setattr(grader._device, "on_gpu", lambda: True)
    monkeypatch.setattr(grader.checker, "evaluate",
                        lambda ex, case, *a, **k: checker.CaseResult(name=case.name, passed=True, problems=[]))
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(grader.TRACE_ENV, str(trace))
    full = get("block_sum")
    ex = dataclasses.replace(full, cases=full.cases[:4])
    lock = gpulock.GpuLock("5", folder=str(tmp_path / "locks"), patience=30.0)
    clock = _Clock()
    results = {}

    def job(name, case_s, start_s):
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        worker = threading.Thread(target=_fake_gpu_worker, args=(to_r, from_w, clock, name, case_s, start_s))
        worker.start()
        result = grader.Result(submission=f"{name}.py", status="error", score=0.0, message="")
        try:
            grader._converse(ex, f"{name}.py", result, checker.new_seed(), "n0nce", to_w, from_r,
                             time.monotonic() + 60, lock)
        finally:
            worker.join(timeout=10)
            for fd in (to_r, to_w, from_r, from_w):
                os.close(fd)
        results[name] = result

    jobs = [threading.Thread(target=job, args=("A", 0.01, 0.05)), threading.Thread(target=job, args=("B", 0.1, 0.0))]
    for t in jobs:
        t.start()
    for t in jobs:
        t.join(timeout=60)
    assert [results[n].status for n in "AB"] == ["passed", "passed"], {n: r.message for n, r in results.items()}
    assert all(r.timing.startswith("alone on GPU 5") and r.perf["met"] for r in results.values())
    assert not clock.overlapping("case", "timing"), clock.spans
    last_b = max(end for what, _, end in clock.spans if what.startswith("case B"))
    timing_a = next(start for what, start, _ in clock.spans if what == "timing A")
    assert timing_a >= last_b, clock.spans
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    b_waits = [e["seconds"] for e in events if e["submission"] == "B.py" and e["event"] == "waited" and
               not e["exclusive"]]
    assert len(b_waits) == 5 and max(b_waits) < 0.05, b_waits  # 4 cases and the timing's preparation
    assert sorted(e["round"] for e in events if e["event"] == "waited" and e["exclusive"]) == [1, 1]


def test_which_python_folders_are_bound(tmp_path):
    """An installed package: its site-packages is bound. A checkout: only the package and a venv inside it, never the
    checkout or a folder above it; relative entries (LD_LIBRARY_PATH=.) never."""
    site_packages = tmp_path / "venv" / "lib" / "site-packages"
    (site_packages / "gpucourse").mkdir(parents=True)
    got = sandbox.select_dirs([str(tmp_path / "venv"), str(site_packages), "/usr/local/lib", "."],
                              str(site_packages / "gpucourse"))
    assert got == tuple(sorted({str(tmp_path / "venv"), str(site_packages / "gpucourse")}))
    checkout = tmp_path / "course"
    (checkout / "gpucourse").mkdir(parents=True)
    (checkout / ".venv").mkdir()
    (checkout / "pyproject.toml").write_text("")
    got = sandbox.select_dirs([str(tmp_path), str(checkout), str(checkout / ".venv"), "relative/dir"],
                              str(checkout / "gpucourse"))
    assert got == (str(checkout / ".venv"), str(checkout / "gpucourse"))


def test_the_private_tmp_is_mounted_before_what_is_bound_on_top_of_it(tmp_path):
    """A CI clone in /tmp (its .venv and package under /tmp): mounted after them, the private /tmp hid the
    interpreter ("bwrap: execvp /tmp/.../.venv/bin/python: No such file or directory" in a fresh clone's CI)."""
    iso = sandbox.Isolation("bubblewrap", "", "/usr/bin/bwrap", True, True)
    cmd = sandbox.command(iso, ["python"], str(tmp_path / "w"), None, False)
    tmp_at = [i for i in range(len(cmd) - 2) if cmd[i] == "--bind" and cmd[i + 2] == "/tmp"]
    ro_at = [i for i in range(len(cmd)) if cmd[i] == "--ro-bind"]
    assert len(tmp_at) == 1 and ro_at
    python_binds = [i for i in ro_at if cmd[i + 1] in sandbox._python_dirs()]
    assert python_binds and tmp_at[0] < min(python_binds)


def test_a_compiler_outside_usr_is_bound(monkeypatch, tmp_path):
    """Triton builds its launcher with $CC (else gcc): on the H100 machine that is /opt/gcc/bin/gcc, and without its
    prefix bound every Triton submission failed inside the sandbox with "No such file or directory: gcc"."""
    tool = tmp_path / "opt-gcc" / "bin" / "gcc"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("CC", str(tool))
    assert str(tmp_path / "opt-gcc") in sandbox.toolchain_dirs()
    got = sandbox.select_dirs(sandbox.toolchain_dirs(), str(tmp_path / "pkg" / "gpucourse"))
    assert str(tmp_path / "opt-gcc") in got and not any(d == "/usr" or d.startswith("/usr/") for d in got)


def test_a_checkout_inside_usr_is_hidden_before_the_package_is_bound_back(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "_masks", lambda: ["/usr/src/app"])
    iso = sandbox.Isolation("bubblewrap", "", "/usr/bin/bwrap", True, True)
    cmd = sandbox.command(iso, ["python"], str(tmp_path), None, False)
    usr, mask = cmd.index("/usr"), cmd.index("/usr/src/app")
    assert cmd[mask - 1] == "--tmpfs" and usr < mask < cmd.index(PACKAGE)
    assert cmd[cmd.index("/usr/src/app", mask + 1) - 1] == "--remount-ro"


def test_the_checkout_a_package_was_pip_installed_from_is_hidden_when_it_is_under_usr(monkeypatch, tmp_path):
    """`pip install .` in a Dockerfile's WORKDIR /usr/src/app leaves the checkout (solutions/ and all) under /usr,
    which is bound whole, while the package lives in site-packages: the checkout is found through the install's
    direct_url.json and masked like one the package sits in."""
    import importlib.metadata

    checkout = tmp_path / "src" / "app"
    (checkout / "solutions").mkdir(parents=True)

    class Installed:
        def __init__(self, url):
            self.url = url

        def read_text(self, name):
            return json.dumps({"url": self.url, "dir_info": {}}) if name == "direct_url.json" else None

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed(checkout.as_uri()))
    assert sandbox.installed_from() == [str(checkout)]
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed("https://example.org/x.whl"))
    assert sandbox.installed_from() == []
    monkeypatch.setattr(sandbox, "installed_from", lambda: ["/usr/src/app", str(checkout)])
    assert "/usr/src/app" in sandbox._masks() and str(checkout) not in sandbox._masks()  # only under /usr


def test_a_virtual_environment_inside_a_masked_checkout_under_usr_is_bound_back():
    """/usr is bound whole, so folders under it are normally not bound again; inside a masked checkout they must
    be (a .venv in /usr/src/app would otherwise vanish under the mask, and the interpreter with it)."""
    lib = next(os.path.join("/usr/lib", d) for d in sorted(os.listdir("/usr/lib"))
               if os.path.isdir(os.path.join("/usr/lib", d)) and not os.path.islink(os.path.join("/usr/lib", d)))
    assert lib not in sandbox.select_dirs([lib], PACKAGE)  # seen through /usr already
    assert lib in sandbox.select_dirs([lib], PACKAGE, masks=("/usr/lib",))


@needs_sandbox
@pytest.mark.skipif(gpucourse.on_gpu(), reason="shows the GPU probe failing, on a machine without a GPU")
def test_a_gpu_sandbox_where_cuda_cannot_start_falls_back_to_the_process_level_and_says_why():
    """In GPU mode the probe starts CUDA inside the sandbox; here (no GPU) it cannot, which stands for a device node
    the sandbox lacks: the batch would be graded at the process level, with the reason, not fail submission by one."""
    iso = sandbox._probe(True)
    assert iso.level == "process" and "CUDA sees no GPU inside the sandbox" in iso.detail
    assert "NVIDIA device nodes" in iso.detail


@needs_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="only root can use bubblewrap without a user namespace")
def test_as_root_without_user_namespaces_the_sandbox_still_holds(tmp_path):
    """Where the kernel or a container refuses user namespaces (a bwrap that fails on --unshare-user stands for it),
    root still gets the sandbox without one (no capabilities), says so, and the escapes still fail."""
    from submissions_util import expectation, load_expected, misgraded

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        for a in "$@"; do
            [ "$a" = "--unshare-user" ] && {{ echo "bwrap: No permissions to create new namespace" >&2; exit 1; }}
        done
        exec {ISOLATION.bwrap} "$@"
        """))
    (fake / "bwrap").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    env.pop(sandbox.ENV_VAR, None)
    files = ["escape_daemon.py", "escape_read_classmate.py", "escape_write_package.py",
             "right_graded_beside_the_daemon.py"]
    report, _ = _report(tmp_path, *[os.path.join(ESCAPES, f) for f in files], env=env)
    assert report["isolation"]["level"] == "bubblewrap"
    assert "as root without a user namespace" in report["isolation"]["detail"]
    expected = load_expected("escapes")["EXPECTED"]
    wrong = {f: misgraded(r, expectation(expected[f], "cpu")) for f, r in zip(files, report["results"])}
    assert not any(wrong.values()), (wrong, _verdicts(report))
