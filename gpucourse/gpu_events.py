"""Timing on the GPU with CUDA events: :func:`event_times` (each repeat bracketed by its own events), the buffer that
flushes L2 between repeats, and :func:`graph_repeat` (many calls of a tiny kernel in one CUDA graph). timing.py's
bench() uses these where ``triton.testing.do_bench`` cannot serve."""
from __future__ import annotations

from typing import Callable

from . import device

_flush_buffer = None


def l2_flush_buffer():
    """A buffer larger than L2 (twice its size, at least 256 MiB) on the GPU, made once: writing or reading all of it
    evicts what L2 held."""
    global _flush_buffer
    if _flush_buffer is None:
        import torch

        p = device.props()
        nbytes = max(256 * 1024 * 1024, 2 * (p.l2_bytes if p else 0))
        _flush_buffer = torch.empty(nbytes, dtype=torch.int8, device="cuda")
    return _flush_buffer


def event_times(fn: Callable[[], object], reps: int = 10, warmup: int = 1, before: Callable | None = None,
                lead_sleep_cycles: int = 0, wait_each: bool = True) -> list:
    """ms of each of ``reps`` calls of ``fn`` on the GPU, each bracketed by its own CUDA events, after ``warmup``
    untimed calls. No L2 flush unless ``before`` does one (it runs before each start event, untimed).

    ``wait_each``: wait for each call before queuing the next (the host's own gaps then fall between repeats, never
    inside one); ``False`` queues all repeats at once, as do_bench does.
    ``lead_sleep_cycles``: queue a GPU sleep of that many cycles before each start event. A kernel of a few
    microseconds is shorter than its own launch: without work queued ahead of it the events also time the GPU
    waiting for the launch. The sleep keeps the GPU busy while the CPU queues the call, and touches no memory (L2
    stays as it was)."""
    import torch

    for _ in range(max(warmup, 0)):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if before is not None:
            before()
        if lead_sleep_cycles:
            torch.cuda._sleep(lead_sleep_cycles)
        starts[i].record()
        fn()
        ends[i].record()
        if wait_each:
            ends[i].synchronize()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def graph_repeat(fn: Callable[[], object], reps: int, fallback: bool = True) -> Callable[[], object]:
    """One callable that runs ``fn`` ``reps`` times. On a GPU the calls are captured in one CUDA graph, so small
    kernels run back to back without the CPU's launch gaps between them. ``fn`` is run once on a side stream first
    (as PyTorch's docs prescribe before a capture). Where a graph cannot be captured (CPU mode, an old driver),
    ``fallback`` gives a plain loop, gaps and all; ``fallback=False`` raises instead."""
    if device.on_gpu():
        import torch

        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(reps):
                    fn()
            return graph.replay
        except Exception:
            if not fallback:
                raise
            torch.cuda.synchronize()

    def loop():
        for _ in range(reps):
            fn()
    return loop
