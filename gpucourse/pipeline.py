"""The measurements behind lessons 01 and 02, as plain functions: the notebooks show them and ``gpucourse bench``
records them (bench_suites/pipeline02.py), so both run the same code.

Lesson 01: where the GPU starts to beat the CPU (``crossover``), what naive timing gets wrong (``timing_pairs``).
Lesson 02: host-to-device copy bandwidth (``h2d_bandwidth``), copy/compute overlap (``copy_compute_overlap``), launch
overhead vs a CUDA graph (``launch_overhead``) and the training-loop case study (``training_loop_study``).
Everything except ``crossover`` needs a GPU; ``crossover`` measures only the CPU in CPU mode.
"""
from __future__ import annotations

import statistics
import time

import torch

from . import device, timing
from .timing import bench, settle


def host_ms(fn, rep_ms: float = 30, min_reps: int = 5) -> float:
    """Median ms of ``fn()`` on the host clock (for work that runs on the CPU, in either mode)."""
    return statistics.median(timing._cpu_samples(fn, warmup_ms=5, rep_ms=rep_ms, min_reps=min_reps, max_reps=10_000))


def _make_op(op: str, n: int, dev: str):
    if op == "matmul":  # n x n matrices
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        return lambda: a @ b
    if op == "add":  # n elements
        x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
        return lambda: x + y
    raise ValueError(f"op must be 'matmul' or 'add', not {op!r}")


def default_sizes(op: str) -> list:
    if op == "matmul":
        return [2**k for k in range(4, 12 if device.on_gpu() else 9)]  # 16 .. 2048 (CPU mode: .. 256)
    return [4**k for k in range(4, 13 if device.on_gpu() else 10)]  # 256 .. 16M elements (CPU mode: .. 256K)


def crossover(op: str = "matmul", sizes=None) -> dict:
    """Median time of ``op`` on the CPU and (GPU mode) on the GPU at each size, fp32, and the smallest size from
    which the GPU is faster at every larger size (None in CPU mode, or if it never wins)."""
    sizes = list(sizes or default_sizes(op))
    cpu_ms, gpu_ms = [], []
    for n in sizes:
        cpu_ms.append(host_ms(_make_op(op, n, "cpu")))
        if device.on_gpu():
            gpu_ms.append(bench(_make_op(op, n, "cuda"), rep_ms=30, flush_l2=False).median_ms)
    cross = None
    if gpu_ms:
        for i in range(len(sizes)):
            if all(g < c for g, c in zip(gpu_ms[i:], cpu_ms[i:])):
                cross = sizes[i]
                break
    return {"op": op, "sizes": sizes, "cpu_ms": cpu_ms, "gpu_ms": gpu_ms or None, "crossover": cross,
            "unit": "matrix side n (n x n fp32)" if op == "matmul" else "elements (fp32)"}


def plot_crossover(results: list, ax=None):
    """One panel per op: time vs size on each device, the crossover marked."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.8), squeeze=False)
        ax = ax[0]
    for a, r in zip(ax, results):
        a.plot(r["sizes"], r["cpu_ms"], marker="o", label="CPU")
        if r["gpu_ms"]:
            a.plot(r["sizes"], r["gpu_ms"], marker="o", label="GPU")
        if r["crossover"]:
            a.axvline(r["crossover"], color="gray", linestyle="--")
            a.annotate(f"GPU wins from {r['crossover']:,}", (r["crossover"], max(r["cpu_ms"])), color="gray")
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel(r["unit"])
        a.set_ylabel("time per call (ms, median)")
        a.set_title(r["op"])
        a.grid(True, which="both", alpha=0.3)
        a.legend()
    return ax


# ---------------------------------------------------------------------------------------------------------------------
# GPU only from here.


def _events_ms(fn, reps: int = 10, lead_sleep_cycles: int = 0) -> list:
    """Each call bracketed by its own CUDA events (no L2 flush), after one warm-up call.

    ``lead_sleep_cycles``: queue a GPU sleep of that many cycles before each start event. A kernel of a few
    microseconds is shorter than its own launch: without work queued ahead of it the events also time the GPU
    waiting for the launch. The sleep keeps the GPU busy while the CPU queues the call, and touches no memory (L2
    stays as it was)."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if lead_sleep_cycles:
            torch.cuda._sleep(lead_sleep_cycles)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return out


# Which way each timing mistake pushes the number: "low" (the wrong time reads too fast), "high" (too slow), or
# "either" (it depends on the GPU). The benchmark's targets check the pair points this way.
MISTAKE_DIRECTION = {"no synchronize": "low", "first call timed": "high", "inputs left in L2": "low",
                     "clocks not steady (idle GPU, no settle)": "either"}


def timing_pairs(idle_s: float = 3.0) -> list:
    """Four timing mistakes on the GPU, each as (wrong number, right number) in ms, with what went wrong
    (``mistake``: a key of ``MISTAKE_DIRECTION``, which says which way it errs)."""
    device.require_gpu("timing_pairs")
    out = []
    n = 4096
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    mm = lambda: a @ b  # noqa: E731
    mm()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    mm()
    wrong = (time.perf_counter() - t0) * 1e3  # no synchronize: the launch only
    torch.cuda.synchronize()
    out.append({"mistake": "no synchronize", "what": f"fp32 matmul {n}x{n}", "wrong_ms": wrong,
                "right_ms": bench(mm).median_ms})

    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.relu(x) * 2)
    x = torch.randn(2**24, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    f(x)
    torch.cuda.synchronize()
    wrong = (time.perf_counter() - t0) * 1e3
    out.append({"mistake": "first call timed", "what": "torch.compile'd relu(x)*2 on 16M floats", "wrong_ms": wrong,
                "right_ms": bench(f, x).median_ms})

    x = torch.randn(2**21, device="cuda")  # 8 MB: fits in the L2 of an A100/H100
    y = torch.empty_like(x)
    nbytes = 2 * x.nbytes
    op = lambda: torch.mul(x, 2, out=y)  # noqa: E731
    # Both timed as kernels (a GPU sleep queued ahead hides the launch, see _events_ms); only L2 differs: the same
    # 8 MB again and again (served from L2) vs L2 flushed before each call (from device memory).
    hot_ms = statistics.median(_events_ms(op, reps=50, lead_sleep_cycles=200_000))
    cold = bench(op, bytes=nbytes, flush_l2=True)
    out.append({"mistake": "inputs left in L2", "what": "x * 2 on 8 MB", "wrong_ms": hot_ms,
                "right_ms": cold.median_ms, "wrong_gbps": timing.gbps(nbytes, hot_ms), "right_gbps": cold.gbps,
                "peak_gbps": cold.peak_gbs})

    m = 8192
    a16, b16 = torch.randn(m, m, device="cuda", dtype=torch.bfloat16), torch.randn(m, m, device="cuda",
                                                                                   dtype=torch.bfloat16)
    mm16 = lambda: a16 @ b16  # noqa: E731
    mm16()
    torch.cuda.synchronize()
    time.sleep(idle_s)  # let the GPU go idle and its clocks drop
    cold_start = statistics.median(_events_ms(mm16, reps=5))
    settle(mm16, seconds=2.0)
    steady = statistics.median(_events_ms(mm16, reps=20))
    # Which way it errs depends on the GPU: clocks may still be ramping up from idle (too slow), or a power-capped
    # GPU may run at boost clocks until it reaches its power limit (too fast; the course's H100 did this).
    out.append({"mistake": "clocks not steady (idle GPU, no settle)", "what": f"bf16 matmul {m}x{m}",
                "wrong_ms": cold_start, "right_ms": steady})
    return out


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
        gpu_ms = statistics.median(_events_ms(lambda: dst.copy_(src, non_blocking=nb), reps))
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
        res[name] = statistics.median(_events_ms(fn, reps=10))
    copy_only = statistics.median(_events_ms(lambda: [d.copy_(h, non_blocking=True) for h, d in zip(host, dev)], 10))
    compute_only = statistics.median(_events_ms(lambda: [d @ w for d in dev], 10))
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

    eager_ms = statistics.median(_events_ms(many, reps=20))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before capture, as the PyTorch docs prescribe
        many()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        many()
    graph_ms = statistics.median(_events_ms(graph.replay, reps=20))
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
        out["compiled_reduce_overhead_us_per_call"] = 1e3 * statistics.median(_events_ms(lambda: compiled(y), 20))
        out["eager_chain_us_per_call"] = 1e3 * statistics.median(_events_ms(lambda: chain(y), 20))
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
    from . import timeline, trainloop

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
