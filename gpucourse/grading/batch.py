"""What a batch shares: its GPU slots, the prebuilds run ahead of the grading slots (:class:`Ahead`), the
environment its report names, and whether its results may be given points (:func:`standing`)."""
from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import TYPE_CHECKING

import torch

from .. import device as _device
from .. import env as _env
from . import sandbox

if TYPE_CHECKING:
    from .staging import Prepared


def gpu_slots(jobs: int) -> list:
    """The CUDA_VISIBLE_DEVICES value for each job slot: one GPU each where there are several, else None."""
    if not _device.on_gpu():
        return [None] * jobs
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [s.strip() for s in visible.split(",") if s.strip()] if visible else \
        [str(i) for i in range(torch.cuda.device_count())]
    if len(ids) <= 1:
        return [None] * jobs
    return [ids[i % len(ids)] for i in range(jobs)]


def gpu_index(gpu: str | None) -> str:
    """The GPU a job slot uses, as CUDA_VISIBLE_DEVICES names it (its slot's, else the first visible one)."""
    if gpu is not None:
        return gpu
    visible = [s.strip() for s in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if s.strip()]
    return visible[0] if visible else "0"


PREBUILD_JOBS_ENV = "GPUCOURSE_PREBUILD_JOBS"  # how many CUDA compiles run at once ahead of the slots (default --jobs)


def prebuild_jobs() -> int | None:
    """$GPUCOURSE_PREBUILD_JOBS as a whole number >= 1, None where unset (compiles are CPU work: on a machine with
    few cores per job, fewer at once finish sooner each)."""
    text = os.environ.get(PREBUILD_JOBS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"${PREBUILD_JOBS_ENV}={text!r}: expected a whole number >= 1")
    return int(text)


class Ahead:
    """The prebuilds of a batch, run by their own pool ahead of the grading slots. :meth:`take` (a slot's call)
    submits the prebuilds up to ``ahead`` submissions beyond the one it takes, in order (the pool runs them in that
    order, so the one a slot waits for is never queued behind later ones), and waits for its own. ``prepare``:
    staging.prepare, or a stand-in with its signature."""

    def __init__(self, prepare, ex, paths: list, timeout: float, isolation, workers: int, slots: int):
        self.prepare, self.ex, self.paths, self.timeout, self.isolation = prepare, ex, paths, timeout, isolation
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
                self.futures[self.submitted] = self.pool.submit(self.prepare, self.ex, path, self.timeout,
                                                                self.isolation)
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


def environment() -> dict:
    v = _env.versions()
    return dict(v, fingerprint=_env.fingerprint(v))


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
