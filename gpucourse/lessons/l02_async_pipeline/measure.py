"""What lesson 02 measures, as plain functions (all need a GPU): the notebook shows them and ``gpucourse bench``
records them (``bench.py``), so both run the same code.

Host-to-device copy bandwidth (``h2d_bandwidth``), copy/compute overlap (``copy_compute_overlap``), launch overhead vs
a CUDA graph (``launch_overhead``) and the training-loop case study (``training_loop_study``).
"""
from __future__ import annotations

import statistics
import time

import torch

from gpucourse import device, timeline, timing

from . import trainloop


def h2d_bandwidth(mbytes: int = 256, reps: int = 10) -> dict:
    """Host-to-device copy GB/s from pageable and from pinned memory, blocking and ``non_blocking=True``, and how long
    the host is blocked by each call (ms)."""
    device.require_gpu("h2d_bandwidth")
    n = mbytes * 2**20 // 4
    pageable = torch.randn(n)
    pinned = pageable.pin_memory()
    dst = torch.empty(n, device="cuda")
    out = {"mbytes": mbytes}
    for name, src, nb in (("pageable", pageable, False), ("pageable, non_blocking", pageable, True),
                          ("pinned", pinned, False), ("pinned, non_blocking", pinned, True)):
        gpu_ms = statistics.median(timing.event_times(lambda: dst.copy_(src, non_blocking=nb), reps))
        host = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=nb)
            host.append((time.perf_counter() - t0) * 1e3)  # how long the call kept the CPU
            torch.cuda.synchronize()
        out[name] = {"gbps": timing.gbps(src.nbytes, gpu_ms), "copy_ms": gpu_ms,
                     "host_blocked_ms": statistics.median(host)}
    return out


def copy_compute_overlap(chunks: int = 8, rows: int = 8192, cols: int = 4096) -> dict:
    """Copy ``chunks`` pinned host batches to the GPU and multiply each by a weight: one stream (copy, compute, copy,
    ...) vs a copy stream that queues every copy at once, the compute stream waiting on each chunk's event. Wall ms
    of each, and the ratio."""
    device.require_gpu("copy_compute_overlap")
    host = [torch.randn(rows, cols).pin_memory() for _ in range(chunks)]
    dev = [torch.empty(rows, cols, device="cuda") for _ in range(chunks)]
    w = torch.randn(cols, cols, device="cuda")

    def serial():
        for h, d in zip(host, dev):
            d.copy_(h, non_blocking=True)
            d @ w

    copy_stream = torch.cuda.Stream()

    def overlapped():
        main = torch.cuda.current_stream()
        copy_stream.wait_stream(main)  # the buffers are free: the previous round's matmuls are done
        done = []
        with torch.cuda.stream(copy_stream):
            for h, d in zip(host, dev):
                d.copy_(h, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(copy_stream)
                done.append(ev)
        for d, ev in zip(dev, done):
            main.wait_event(ev)  # compute on chunk i waits only for copy i
            d @ w

    res = {}
    for name, fn in (("one stream", serial), ("copy stream + compute stream", overlapped)):
        res[name] = statistics.median(timing.event_times(fn, reps=10))
    copy_only = statistics.median(timing.event_times(lambda: [d.copy_(h, non_blocking=True) for h, d in zip(host, dev)], 10))
    compute_only = statistics.median(timing.event_times(lambda: [d @ w for d in dev], 10))
    return {"chunks": chunks, "chunk_mbytes": rows * cols * 4 / 2**20, "ms": res, "copy_only_ms": copy_only,
            "compute_only_ms": compute_only, "speedup": res["one stream"] / res["copy stream + compute stream"]}


def launch_overhead(n_kernels: int = 200, with_compile: bool = True) -> dict:
    """µs per kernel for ``n_kernels`` tiny in-place adds: launched one by one (eager) vs replayed as one CUDA graph;
    and, for reference, ``torch.compile(mode="reduce-overhead")`` of the same function (which also fuses them)."""
    device.require_gpu("launch_overhead")
    x = torch.zeros(1, device="cuda")

    def many():
        for _ in range(n_kernels):
            x.add_(1)

    eager_ms = statistics.median(timing.event_times(many, reps=20))
    replay = timing.graph_repeat(many, 1, fallback=False)  # the n_kernels launches captured in one graph
    graph_ms = statistics.median(timing.event_times(replay, reps=20))
    out = {"n_kernels": n_kernels, "eager_us_per_kernel": 1e3 * eager_ms / n_kernels,
           "graph_us_per_kernel": 1e3 * graph_ms / n_kernels, "graph_speedup": eager_ms / graph_ms}
    if with_compile:
        torch._dynamo.reset()
        y = torch.zeros(1, device="cuda")

        def chain(t):
            for _ in range(n_kernels):
                t = t + 1
            return t

        compiled = torch.compile(chain, mode="reduce-overhead")
        for _ in range(3):
            compiled(y)
        out["compiled_reduce_overhead_us_per_call"] = 1e3 * statistics.median(timing.event_times(lambda: compiled(y), 20))
        out["eager_chain_us_per_call"] = 1e3 * statistics.median(timing.event_times(lambda: chain(y), 20))
    return out


class SlowLoader:
    """The batches of a list, each handed out after ``host_ms`` of host work (a stand-in for decoding and
    augmentation): the CPU time a synchronization exposes to the GPU."""

    def __init__(self, batches: list, host_ms: float):
        self.batches, self.host_ms = batches, host_ms

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for b in self.batches:
            t_end = time.perf_counter() + self.host_ms / 1e3
            while time.perf_counter() < t_end:  # busy host work (a sleep would also do; this looks like decoding)
                pass
            yield b


def training_loop_study(steps: int = 40, batch: int = 4096, features: int = 1024, hidden: int = 4096,
                        classes: int = 1000, host_ms: float = 1.0, reps: int = 3) -> dict:
    """Every version of lesson 02's loop (trainloop.STEPS): wall ms per step (median of ``reps`` runs, results
    read at the end included), speedup over the naive loop, the GPU's busy ms per step (from a profile) and the GPU
    idle fraction ``1 - busy / wall``; ``profiled_idle_fraction`` is the idle share within the profiled run."""
    device.require_gpu("training_loop_study")
    rows = {}
    for name, fn in trainloop.STEPS.items():
        model, opt, batches = trainloop.make_problem(0, steps=steps, batch=batch, features=features, hidden=hidden,
                                                     classes=classes)
        loader = SlowLoader(batches, host_ms)
        fn(model, opt, loader)  # warm-up: cuBLAS handles, allocator
        walls = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            trainloop.to_host(fn(model, opt, loader))
            walls.append((time.perf_counter() - t0) * 1e3 / steps)
        tl = timeline.profile(lambda: trainloop.to_host(fn(model, opt, loader)), warmup=0)
        wall, busy = statistics.median(walls), tl.gpu_busy_us() / 1e3 / steps
        # The profiler slows the host (it records every op), so the profiled run's own idle share overstates the
        # idling of a loop that is GPU-bound without it. The GPU's busy time per step hardly changes under the
        # profiler; set against the unprofiled wall time it gives the idle share of the loop as timed above.
        rows[name] = {"ms_per_step": wall, "gpu_busy_ms_per_step": busy,
                      "gpu_idle_fraction": max(0.0, 1.0 - busy / wall),
                      "profiled_idle_fraction": tl.idle_fraction()}
    base = rows["naive"]["ms_per_step"]
    for r in rows.values():
        r["speedup_vs_naive"] = base / r["ms_per_step"]
    return {"steps": steps, "batch": batch, "features": features, "hidden": hidden, "classes": classes,
            "host_ms_per_batch": host_ms, "rows": rows}
