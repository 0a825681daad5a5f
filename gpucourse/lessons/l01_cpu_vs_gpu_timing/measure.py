"""What lesson 01 measures, as plain functions: the notebook shows them and ``gpucourse bench`` records them
(``bench.py``), so both run the same code.

Where the GPU starts to beat the CPU (``crossover``; in CPU mode it measures only the CPU) and what naive timing gets
wrong (``timing_pairs``, GPU only).
"""
from __future__ import annotations

import statistics
import time

import torch

from gpucourse import device, dtypes, timing
from gpucourse.timing import bench, host_ms, settle


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


def _make_moved_op(op: str, n: int, pinned: bool):
    """The op for data that starts on the CPU (GPU only): copy the inputs host to device, run the op on the GPU, copy
    the result back, and wait for it. ``pinned``: the host tensors are page-locked (the copies then run at the link's
    rate and may be asynchronous); otherwise pageable, what ``torch.randn`` gives a learner."""
    shape = (n, n) if op == "matmul" else (n,)
    a, b = torch.randn(*shape), torch.randn(*shape)
    out = torch.empty(*shape)
    if pinned:
        a, b, out = a.pin_memory(), b.pin_memory(), out.pin_memory()
    f = (lambda u, v: u @ v) if op == "matmul" else (lambda u, v: u + v)

    def moved():
        r = f(a.to("cuda", non_blocking=pinned), b.to("cuda", non_blocking=pinned))
        out.copy_(r, non_blocking=pinned)
        torch.cuda.synchronize()  # the result is on the CPU only once the copy has finished
        return out

    return moved


def _first_win(sizes, faster, slower):
    """The smallest size from which ``faster`` beats ``slower`` at every larger size, or None."""
    for i in range(len(sizes)):
        if all(g < c for g, c in zip(faster[i:], slower[i:])):
            return sizes[i]
    return None


def crossover(op: str = "matmul", sizes=None) -> dict:
    """Median time of ``op`` on the CPU and (GPU mode) on the GPU at each size, fp32, and the smallest size from
    which the GPU is faster at every larger size (None in CPU mode, or if it never wins). For the matmul also
    ``cpu_1thread_ms``: the CPU time with ``torch.set_num_threads(1)`` (``threads``: the default it is compared with),
    for both ops, and ``crossover_best_cpu``: the crossover against the faster of the two CPU times at each size, which
    a slow point of one thread count (the pool waking up, another process on the host) cannot move.

    Two GPU cases (GPU mode only): ``gpu_ms``, the data already on the GPU (the op alone, CUDA events, no flush);
    ``moved_ms``, the data starting on the CPU (``"pageable"`` and ``"pinned"`` host tensors: copy both inputs in, the
    op, copy the result back, synchronised, host clock), each with its own crossover in ``moved_crossover``."""
    sizes = list(sizes or default_sizes(op))
    cpu_ms, gpu_ms = [], []
    moved = {"pageable": [], "pinned": []}
    cpu_1t_ms = []
    for n in sizes:
        cpu_ms.append(host_ms(_make_op(op, n, "cpu")))
        threads = torch.get_num_threads()  # the same point on one CPU thread: what the intra-op thread pool adds
        torch.set_num_threads(1)
        try:
            cpu_1t_ms.append(host_ms(_make_op(op, n, "cpu")))
        finally:
            torch.set_num_threads(threads)
        if device.on_gpu():
            gpu_ms.append(bench(_make_op(op, n, "cuda"), rep_ms=30, flush_l2=False).median_ms)
            for kind in moved:
                moved[kind].append(host_ms(_make_moved_op(op, n, pinned=kind == "pinned"), rep_ms=30))
    cross = _first_win(sizes, gpu_ms, cpu_ms) if gpu_ms else None
    best_cpu = [min(a, b) for a, b in zip(cpu_ms, cpu_1t_ms)]
    cross_best = _first_win(sizes, gpu_ms, best_cpu) if gpu_ms else None
    moved_ms = moved if gpu_ms else None
    moved_cross = {k: _first_win(sizes, v, cpu_ms) for k, v in moved.items()} if gpu_ms else None
    return {"op": op, "sizes": sizes, "cpu_ms": cpu_ms, "cpu_1thread_ms": cpu_1t_ms or None,
            "threads": torch.get_num_threads(), "gpu_ms": gpu_ms or None, "crossover": cross,
            "crossover_best_cpu": cross_best, "moved_ms": moved_ms, "moved_crossover": moved_cross,
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
            a.plot(r["sizes"], r["gpu_ms"], marker="o", label="GPU, data already there")
        for kind, ms in (r.get("moved_ms") or {}).items():
            a.plot(r["sizes"], ms, marker=".", linestyle=":", label=f"GPU, data from CPU ({kind})")
        if r["crossover"]:
            a.axvline(r["crossover"], color="gray", linestyle="--")
            a.annotate(f"GPU wins from {r['crossover']:,}", (r["crossover"], max(r["cpu_ms"])), color="gray")
        for kind, c in (r.get("moved_crossover") or {}).items():
            if c:
                a.axvline(c, color="gray", linestyle=":")
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


# Which way each timing mistake pushes the number: "low" (the wrong time reads too fast), "high" (too slow), or
# "either" (it depends on the GPU). The benchmark's targets check the pair points this way.
MISTAKE_DIRECTION = {"no synchronize": "low", "first call timed": "high", "inputs left in L2": "low",
                     "clocks not steady (idle GPU, no settle)": "either"}


matmul_dtype = dtypes.tensor_core_16bit  # bf16, or fp16 on a T4 (saying so): this lesson's tensor-core matmuls


def timing_pairs(idle_s: float = 3.0) -> list:
    """Four timing mistakes on the GPU, each as (wrong number, right number) in ms, with what went wrong
    (``mistake``: a key of ``MISTAKE_DIRECTION``, which says which way it errs) and ``labels``, the names of the two
    numbers: "wrong"/"right", except for the clock row, whose two numbers are two regimes ("after idle"/"after
    settle"), neither of them wrong."""
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
    hot_ms = statistics.median(timing.event_times(op, reps=50, lead_sleep_cycles=200_000))
    cold = bench(op, bytes=nbytes, flush_l2=True)
    out.append({"mistake": "inputs left in L2", "what": "x * 2 on 8 MB", "wrong_ms": hot_ms,
                "right_ms": cold.median_ms, "wrong_gbps": timing.gbps(nbytes, hot_ms), "right_gbps": cold.gbps,
                "peak_gbps": cold.peak_gbs})

    m = 8192
    low = matmul_dtype()  # bf16; float16 on a GPU without bf16 tensor cores (a T4), said in the output
    a16, b16 = torch.randn(m, m, device="cuda", dtype=low.torch), torch.randn(m, m, device="cuda", dtype=low.torch)
    mm16 = lambda: a16 @ b16  # noqa: E731
    mm16()
    torch.cuda.synchronize()
    time.sleep(idle_s)  # let the GPU go idle and its clocks drop
    cold_start = statistics.median(timing.event_times(mm16, reps=5))
    settle(mm16, seconds=2.0)
    steady = statistics.median(timing.event_times(mm16, reps=20))
    # Which way it errs depends on the GPU: clocks may still be ramping up from idle (too slow), or a power-capped
    # GPU may run at boost clocks until it reaches its power limit (too fast; the course's H100 did this).
    out.append({"mistake": "clocks not steady (idle GPU, no settle)", "what": f"{low.short} matmul {m}x{m}",
                "wrong_ms": cold_start, "right_ms": steady, "labels": ("after idle", "after settle")})
    for p in out:
        p.setdefault("labels", ("wrong", "right"))
    return out




# ---------------------------------------------------------------------------------------------------------------------
# Where the data lives decides where small work runs.

WHERE_SIZES = (256, 4096, 65536)


def small_ops_where_data_lives(sizes=WHERE_SIZES, ops: int = 200, reps: int = 15) -> dict:
    """µs per small add ``x + y`` in a stream of ``ops`` of them, three ways: the data lives on the CPU and the add
    runs there; the data lives on the GPU and the add runs there (queued, one synchronize at the end of the stream);
    the data lives on the GPU but each add is done on the CPU (copy both inputs over, add, copy the result back, as
    "small work belongs on the CPU" would have it). Medians of ``reps`` streams, host clock. The GPU rows need a
    GPU (CPU mode: only the first row)."""
    rows = {"data on CPU, add on CPU": [], "data on GPU, add on GPU": [], "data on GPU, add on CPU (round trip)": []}
    for n in sizes:
        xc, yc = torch.randn(n), torch.randn(n)

        def cpu_stream():
            for _ in range(ops):
                xc + yc

        rows["data on CPU, add on CPU"].append(1e3 * host_ms(cpu_stream, rep_ms=20, min_reps=reps) / ops)
        if not device.on_gpu():
            continue
        xg, yg = xc.cuda(), yc.cuda()

        def gpu_stream():
            for _ in range(ops):
                xg + yg
            torch.cuda.synchronize()

        def round_trip_stream():
            for _ in range(ops):
                (xg.cpu() + yg.cpu()).cuda()
            torch.cuda.synchronize()

        for name, fn in (("data on GPU, add on GPU", gpu_stream),
                         ("data on GPU, add on CPU (round trip)", round_trip_stream)):
            fn()  # warm-up
            rows[name].append(1e3 * host_ms(fn, rep_ms=20, min_reps=reps) / ops)
    return {"sizes": list(sizes), "ops": ops, "us_per_add": {k: v for k, v in rows.items() if v}}
