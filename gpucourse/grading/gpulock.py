"""One GPU, one timing at a time: a lock per GPU, shared by every grader on the machine.

Correctness runs in parallel (``--jobs N``), but a speed measurement taken while other jobs run kernels on the same
GPU measures them too (a right kernel once read 0.08x of copy bandwidth beside another job). So the grader process
(never the worker: a sandboxed worker cannot see the lock files, let alone skip them) holds the lock of the worker's
GPU *shared* around each correctness case it sends, and *exclusive* around the timed step. The exclusive side has
priority: a gate lock taken by both keeps new cases from starting while a timing waits. The locks are ``flock``\\ s on
files in ``$TMPDIR/gpucourse-gpu-locks/`` keyed by the GPU's index, so they are released when their holder dies and
two graders on one machine share them.

Timings go in rounds. Taking the GPU alone costs every other job of the GPU a stall: the gate shuts new cases out
while the cases already running drain, and stays shut for the timing. Taken once per timing, with 16 jobs on an H100
that stall was most of a submission's time (a case waited 9.6 s median for the lock, a timing 3.2 s, for 0.66 s of
timing). So within one grader, a timing first waits (up to ``patience`` seconds) until no job of the grader is in its
cases (:meth:`GpuLock.casework`), and the timings waiting then, or arriving while the GPU is held, run one after the
other under a single exclusive hold: one drain and one stall for the round, and no case of any grader runs during
any timing of it, as before.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import time

LOCK_DIR = os.path.join(tempfile.gettempdir(), "gpucourse-gpu-locks")
PATIENCE_S = 10.0  # how long a timing waits for the grader's cases to finish before it shuts them out


class GpuLock:
    """``shared()`` around a correctness case, ``casework()`` around a job's run of cases, ``exclusive()`` around a
    timing, on GPU ``gpu`` (its index as CUDA_VISIBLE_DEVICES names it). ``shared()`` and ``exclusive()`` yield the
    seconds they waited (the grader adds them to the submission's time limit: waiting for another job is not the
    submission's time). One object per GPU serves every job of a grader (:func:`for_gpu`): its rounds of timings are
    kept in it. ``problem`` is set when the lock files cannot be opened; the lock then does nothing and the report
    says the timing was not alone."""

    def __init__(self, gpu: str, folder: str = LOCK_DIR, patience: float = PATIENCE_S):
        self.gpu = str(gpu)
        self.problem = None
        self.patience = patience
        self.paths = [os.path.join(folder, f"gpu-{self.gpu}.{part}.lock") for part in ("gate", "main")]
        self._cond = threading.Condition()
        self._busy = 0  # jobs of this grader inside casework()
        self._queued = 0  # timings of this grader waiting for the GPU, or timing
        self._round = None  # the (gate, main) descriptors while this grader holds the GPU alone
        self._turn = threading.Lock()  # one timing at a time within a round
        self.rounds = 0  # rounds begun so far; while a timing holds the GPU, the number of its round
        try:
            os.makedirs(folder, exist_ok=True)
            for path in self.paths:
                os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o666))
        except OSError as exc:
            self.problem = f"the GPU lock in {folder} could not be opened ({exc.strerror or exc})"

    def _take(self, exclusive: bool) -> tuple:
        """The flocks: the gate, then the main lock shared or exclusive (a reader lets the gate go at once, so the
        next one comes in; a writer keeps it shut). Returns the two descriptors; closing them releases both."""
        gate = os.open(self.paths[0], os.O_RDWR)
        try:
            main = os.open(self.paths[1], os.O_RDWR)
        except OSError:
            os.close(gate)
            raise
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if not exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
        except BaseException:
            os.close(main)
            os.close(gate)
            raise
        return gate, main

    @contextlib.contextmanager
    def shared(self):
        if self.problem:
            yield 0.0
            return
        t0 = time.monotonic()
        fds = self._take(exclusive=False)
        try:
            yield time.monotonic() - t0
        finally:
            for fd in fds:
                os.close(fd)

    @contextlib.contextmanager
    def casework(self):
        """Around a job's cases (from its first case to its last hold before the timing): a timing of this grader
        waits for every job to leave it, up to ``patience``, before it takes the GPU."""
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        """The GPU alone: no case or timing of any grader runs on it meanwhile. Joins this grader's round of
        timings where one holds the GPU, else waits for the grader's cases to finish (``patience`` at most) and
        starts one; the round ends, and the GPU is let go, when its last timing ends."""
        if self.problem:
            yield 0.0
            return
        t0 = time.monotonic()
        with self._cond:
            self._queued += 1
            self._cond.wait_for(lambda: self._round is not None or self._busy == 0, timeout=self.patience)
        try:
            with self._turn:
                if self._round is None:
                    fds = self._take(exclusive=True)
                    with self._cond:
                        self._round = fds
                        self.rounds += 1
                        self._cond.notify_all()  # timings still waiting for quiet join this round
                yield time.monotonic() - t0
        finally:
            with self._cond:
                self._queued -= 1
                if self._queued == 0 and self._round is not None:
                    for fd in self._round:
                        os.close(fd)
                    self._round = None
                self._cond.notify_all()


_locks: dict = {}
_locks_guard = threading.Lock()


def for_gpu(gpu: str, folder: str = LOCK_DIR) -> GpuLock:
    """This process's lock of GPU ``gpu``: one object for every job that uses it, so timings can go in rounds."""
    with _locks_guard:
        key = (str(gpu), folder)
        if key not in _locks:
            _locks[key] = GpuLock(gpu, folder)
        return _locks[key]
