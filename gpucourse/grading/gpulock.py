"""One GPU, one timing at a time: a lock per GPU, shared by every grader on the machine.

Correctness runs in parallel (``--jobs N``), but a speed measurement taken while other jobs run kernels on the same
GPU measures them too (a right kernel once read 0.08x of copy bandwidth beside another job). So the grader process
(never the worker: a sandboxed worker cannot see the lock files, let alone skip them) holds the lock of the worker's
GPU *shared* around each correctness case it sends, and *exclusive* around the timed step. The exclusive side has
priority: a gate lock taken by both keeps new cases from starting while a timing waits. The locks are ``flock``\\ s on
files in ``$TMPDIR/gpucourse-gpu-locks/`` keyed by the GPU's index, so they are released when their holder dies and
two graders on one machine share them.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time

LOCK_DIR = os.path.join(tempfile.gettempdir(), "gpucourse-gpu-locks")


class GpuLock:
    """``shared()`` around a correctness case and ``exclusive()`` around a timing, on GPU ``gpu`` (its index as
    CUDA_VISIBLE_DEVICES names it). Each yields the seconds it waited (the grader adds them to the submission's time
    limit: waiting for another job is not the submission's time). ``problem`` is set when the lock files cannot be
    opened; the lock then does nothing and the report says the timing was not alone."""

    def __init__(self, gpu: str, folder: str = LOCK_DIR):
        self.gpu = str(gpu)
        self.problem = None
        self.paths = [os.path.join(folder, f"gpu-{self.gpu}.{part}.lock") for part in ("gate", "main")]
        try:
            os.makedirs(folder, exist_ok=True)
            for path in self.paths:
                os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o666))
        except OSError as exc:
            self.problem = f"the GPU lock in {folder} could not be opened ({exc.strerror or exc})"

    @contextlib.contextmanager
    def _held(self, exclusive: bool):
        if self.problem:
            yield 0.0
            return
        t0 = time.monotonic()
        gate = os.open(self.paths[0], os.O_RDWR)
        main = os.open(self.paths[1], os.O_RDWR)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if not exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)  # a reader lets the next one in; a writer keeps the gate shut
            yield time.monotonic() - t0
        finally:
            os.close(main)  # closing releases the flock
            os.close(gate)

    def shared(self):
        return self._held(exclusive=False)

    def exclusive(self):
        return self._held(exclusive=True)
