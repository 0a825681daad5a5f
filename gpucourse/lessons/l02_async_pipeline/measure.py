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


def _kernel_times(fn) -> tuple:
    """(median kernel duration, median gap from one kernel's end to the next one's start), µs, over the kernels of
    one call of ``fn`` under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with timeline.quiet_profiler(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    ks = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                if str(e.device_type).endswith("CUDA") and "memcpy" not in e.name.lower())
    if not ks:
        return float("nan"), float("nan"), 0
    durations = [e - s for s, e in ks]
    gaps = [s2 - e1 for (_, e1), (s2, _) in zip(ks, ks[1:])]
    return statistics.median(durations), (statistics.median(gaps) if gaps else float("nan")), len(ks)


def launch_overhead(n_kernels: int = 200, with_compile: bool = True) -> dict:
    """µs per kernel for ``n_kernels`` tiny in-place adds: launched one by one (eager) vs replayed as one CUDA graph;
    the same for an empty kernel (``torch.cuda._sleep(0)``: the least a launch can cost, host and GPU); where the
    time goes (the host's time to queue one add, a median of 20 repeats as the eager total is, the GPU's kernel
    duration and gap between kernels in the replay);
    and ``torch.compile`` of the same adds written as a function, default and ``mode="reduce-overhead"``, with the
    kernels each runs per call."""
    device.require_gpu("launch_overhead")
    from gpucourse.asyncqueue import sleep_kernel

    x = torch.zeros(1, device="cuda")

    def many():
        for _ in range(n_kernels):
            x.add_(1)

    def empties():
        for _ in range(n_kernels):
            torch.cuda._sleep(0)

    out = {"n_kernels": n_kernels}
    for label, fn in (("", many), ("empty_", empties)):
        eager_ms = statistics.median(timing.event_times(fn, reps=20))
        replay = timing.graph_repeat(fn, 1, fallback=False)  # the n_kernels launches captured in one graph
        graph_ms = statistics.median(timing.event_times(replay, reps=20))
        out[f"{label}eager_us_per_kernel"] = 1e3 * eager_ms / n_kernels
        out[f"{label}graph_us_per_kernel"] = 1e3 * graph_ms / n_kernels
        kernel_us, gap_us, count = _kernel_times(replay)
        out[f"{label}graph_kernel_us"], out[f"{label}graph_gap_us"] = kernel_us, gap_us
        # The host's own cost of queuing them: timed while the GPU is held by a long kernel, so no launch waits;
        # a median over as many repeats as the eager total above.
        host_us = []
        for _ in range(20):
            sleep_kernel(20.0)
            t0 = time.perf_counter()
            fn()
            host_us.append((time.perf_counter() - t0) * 1e6 / n_kernels)
            torch.cuda.synchronize()
        out[f"{label}eager_host_us_per_kernel"] = statistics.median(host_us)
    out["graph_speedup"] = out["eager_us_per_kernel"] / out["graph_us_per_kernel"]
    out["empty_graph_speedup"] = out["empty_eager_us_per_kernel"] / out["empty_graph_us_per_kernel"]
    if with_compile:
        torch._dynamo.reset()
        y = torch.zeros(1, device="cuda")

        def chain(t):
            for _ in range(n_kernels):
                t = t + 1
            return t

        out["eager_chain_us_per_call"] = 1e3 * statistics.median(timing.event_times(lambda: chain(y), 20))
        for key, mode in (("compiled_default", None), ("compiled_reduce_overhead", "reduce-overhead")):
            compiled = torch.compile(chain, mode=mode) if mode else torch.compile(chain)
            for _ in range(3):
                compiled(y)
            out[f"{key}_us_per_call"] = 1e3 * statistics.median(timing.event_times(lambda: compiled(y), 20))
            kernel_us, _, count = _kernel_times(lambda: compiled(y))
            out[f"{key}_kernels_per_call"], out[f"{key}_kernel_us"] = count, kernel_us
            # host time of one call, the GPU left idle: guards, the wrapper, the launch (or the graph replay)
            out[f"{key}_host_us_per_call"] = 1e3 * timing.host_ms(lambda: compiled(y), rep_ms=20)
            torch.cuda.synchronize()
        torch._dynamo.reset()
    return out


SMALL_COPY_BYTES = (4 * 2**10, 64 * 2**10, 256 * 2**10, 1 * 2**20, 16 * 2**20)


def small_copies(sizes=SMALL_COPY_BYTES, queued_ms: float = 2.0, reps: int = 5) -> dict:
    """How long a host-to-device copy call keeps the CPU when the GPU still has ``queued_ms`` of work queued ahead of
    it, for each size and kind of copy (pageable or pinned source, blocking or ``non_blocking=True``): a call that
    waits for the queue takes at least ``queued_ms``. Medians of ``reps``, ms."""
    device.require_gpu("small_copies")
    from gpucourse.asyncqueue import sleep_kernel

    out = {"queued_ms": queued_ms, "sizes": list(sizes), "host_ms": {}}
    kinds = (("pageable", False, False), ("pageable, non_blocking", False, True), ("pinned", True, False),
             ("pinned, non_blocking", True, True))
    for name, pinned, nb in kinds:
        row = []
        for nbytes in sizes:
            src = torch.randn(nbytes // 4)
            if pinned:
                src = src.pin_memory()
            dst = torch.empty(nbytes // 4, device="cuda")
            dst.copy_(src)
            samples = []
            for _ in range(reps):
                torch.cuda.synchronize()
                sleep_kernel(queued_ms)
                t0 = time.perf_counter()
                dst.copy_(src, non_blocking=nb)
                samples.append((time.perf_counter() - t0) * 1e3)
                torch.cuda.synchronize()
            row.append(statistics.median(samples))
        out["host_ms"][name] = row
    return out


def optimizer_step_returns(queued_ms: float = 5.0, reps: int = 5) -> dict:
    """ms that ``optimizer.step()`` (SGD with momentum and Adam, on lesson 02's classifier at the case study's size)
    keeps the CPU while the GPU has ``queued_ms`` of work queued ahead of it: far less than ``queued_ms`` means it
    queued its kernels and returned without waiting."""
    device.require_gpu("optimizer_step_returns")
    import torch.nn.functional as F

    from gpucourse.asyncqueue import sleep_kernel

    out = {"queued_ms": queued_ms}
    for name, make in (("SGD (momentum)", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
                       ("Adam", lambda ps: torch.optim.Adam(ps, lr=1e-3))):
        model, _, batches = trainloop.make_problem(0, steps=1, batch=4096, features=1024, hidden=4096, classes=1000)
        opt = make(model.parameters())
        x, y = (t.cuda() for t in batches[0])
        samples = []
        for _ in range(reps + 1):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            torch.cuda.synchronize()
            sleep_kernel(queued_ms)
            t0 = time.perf_counter()
            opt.step()
            samples.append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize()
        out[name] = statistics.median(samples[1:])  # the first step creates the optimizer's state
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
