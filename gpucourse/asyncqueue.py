"""A device queue you can wait on, in both modes: ``synchronize()`` and ``sleep_kernel(ms)``, a kernel of known length.

On a GPU, ``sleep_kernel(ms)`` queues ``torch.cuda._sleep`` (a kernel that spins for a number of clock cycles,
calibrated once against CUDA events) and returns at once, like every kernel launch; ``synchronize()`` is
``torch.cuda.synchronize()``. In CPU mode there is no device, so a background thread plays one: ``sleep_kernel``
puts a sleep on its queue and returns at once, and ``synchronize()`` waits until the queue is empty. That is enough
to show — and to check — the first rule of timing a GPU: the call returns before the work is done, so a timer that
does not wait for the queue measures the launch, not the work.
"""
from __future__ import annotations

import queue
import statistics
import threading
import time

from . import device, timing

_queue: queue.Queue | None = None
_cycles_per_ms: float | None = None


def worker(q: queue.Queue) -> None:
    while True:
        seconds = q.get()
        try:
            if type(seconds) is float:  # never anything else: this thread must not run code that was put on its queue
                time.sleep(seconds)
        finally:
            q.task_done()


def _cpu_queue() -> queue.Queue:
    global _queue
    if _queue is None:
        _queue = queue.Queue()
        threading.Thread(target=worker, args=(_queue,), daemon=True, name="gpucourse-fake-gpu").start()
    return _queue


def synchronize() -> None:
    """Wait until every queued kernel has finished (``torch.cuda.synchronize()`` on a GPU)."""
    if device.on_gpu():
        import torch

        torch.cuda.synchronize()
    if _queue is not None:
        _queue.join()


def cycles_per_ms() -> float:
    """GPU only: clock cycles ``torch.cuda._sleep`` spins per millisecond, measured once with CUDA events."""
    global _cycles_per_ms
    if _cycles_per_ms is None:
        import torch

        device.require_gpu("cycles_per_ms")
        cycles = 2_000_000
        runs = timing.event_times(lambda: torch.cuda._sleep(cycles), reps=5)  # after one untimed call (module load)
        _cycles_per_ms = cycles / statistics.median(runs)
    return _cycles_per_ms


def sleep_kernel(ms: float) -> None:
    """Queue a kernel that runs for about ``ms`` milliseconds and return immediately (both modes)."""
    if device.on_gpu():
        import torch

        torch.cuda._sleep(max(1, int(ms * cycles_per_ms())))
    else:
        _cpu_queue().put(float(ms) / 1e3)
