"""Lesson 05: the workbook's Triton kernels against torch and the copy ceiling (vector add, softmax, matmul), on the
benchmark shapes and off them (``triton05_offshape``), and the fused matmul epilogue against what a practitioner
writes (``triton05_fused_epilogue``).

The kernels are loaded from ``solutions/05_triton.ipynb`` (the one place they live). Every ratio is measured within
one run: our kernel, its peer and the ceiling, timed the same way by ``gpucourse.timing.bench``. The lesson's final
plots are drawn from what these functions return.
"""
from __future__ import annotations

from gpucourse import dtypes
from gpucourse.benchmarks import register, target
from gpucourse.progress import progress
from gpucourse.solutions import for_lesson
from gpucourse.timing import bench, copy_gbps, interleaved, settle

from . import LESSON

solutions = for_lesson(LESSON)  # the solved workbook's namespace, loaded on the first call


@register("triton05_vector_add")
def vector_add_bench() -> dict:
    import torch

    vector_add = solutions()["vector_add"]
    n = 2**28  # 1 GiB per fp32 vector
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    torch.testing.assert_close(vector_add(x, y), x + y, rtol=0, atol=0)
    big = interleaved({"triton": lambda: vector_add(x, y), "torch": lambda: x + y}, bytes=3 * n * 4)
    copy = copy_gbps(n * 4)
    x = y = None  # free the buffers (the timed lambdas above are done)
    sizes = [2**k for k in range(12, 29, 2)]
    series = {"triton": [], "torch": []}
    for s in progress(sizes, "vector_add sweep"):
        a, b = torch.randn(s, device="cuda"), torch.randn(s, device="cuda")
        series["triton"].append(bench(vector_add, a, b, bytes=3 * s * 4).gbps)
        series["torch"].append(bench(torch.add, a, b, bytes=3 * s * 4).gbps)
    triton_gbps, torch_gbps = big["triton"].typical.gbps, big["torch"].typical.gbps
    return {"n": n, "triton_gbps": triton_gbps, "torch_gbps": torch_gbps, "copy_gbps": copy,
            "sweep": {"sizes": sizes, "gbps": series},
            "targets": [target("vector add / copy bandwidth (fp32, 2^28)", triton_gbps / copy, 0.95)]}


def _short_kernel_name(name: str) -> str:
    """A CUDA kernel's name without its return type, namespaces' template arguments and parameter list."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    for stop in ("<", "("):
        name = name.split(stop)[0]
    return name.strip() or "?"


def kernels_launched(fn) -> list:
    """The CUDA kernels one call of ``fn`` launches, by short name, in launch order (torch.profiler, GPU only).
    Returns ``["profiler failed: ..."]`` rather than raising: the names are context, not a result."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        events = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA),
                        key=lambda e: e.time_range.start)
        return [_short_kernel_name(e.name) for e in events]
    except Exception as e:  # noqa: BLE001 - a profiler that cannot start (CUPTI busy) must not sink the benchmark
        return [f"profiler failed: {type(e).__name__}: {e}"[:200]]


@register("triton05_softmax")
def softmax_bench() -> dict:
    """The workbook's softmax at 8192 x 8192 (fp32, fp16) against ``torch.softmax``, ``torch.compile`` of
    ``torch.softmax`` (default mode) and a copy of the same bytes, interleaved; then a sweep of widths over 4096 rows
    against ``torch.softmax``. For each width (and 8192 x 8192) it records the CUDA kernel(s) one ``torch.softmax``
    call launches (torch.profiler), which explains where torch's speed changes with the width, and at 8192 x 8192
    those of the compiled version. ``torch.compile`` is
    code the course does not control: the lesson runs this benchmark in a child process."""
    import torch

    softmax = solutions()["softmax"]

    def torch_softmax(x):
        return torch.softmax(x, dim=-1)

    compiled = torch.compile(torch_softmax, dynamic=False)
    rows = cols = 8192
    figures = {}
    kernels = {}
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))
        torch.testing.assert_close(compiled(x), torch.softmax(x, dim=-1))
        nbytes = 2 * x.numel() * x.element_size()
        r = interleaved({"triton": lambda: softmax(x), "torch": lambda: torch.softmax(x, dim=-1),
                         "torch.compile": lambda: compiled(x)}, bytes=nbytes)
        name = dtypes.torch_name(dtype)
        figures[name] = {"triton_gbps": r["triton"].typical.gbps, "torch_gbps": r["torch"].typical.gbps,
                         "compile_gbps": r["torch.compile"].typical.gbps,
                         "copy_gbps": copy_gbps(x.numel() * x.element_size())}
        kernels[name] = {f"{rows}x{cols}": kernels_launched(lambda: torch.softmax(x, dim=-1)),
                         f"torch.compile {rows}x{cols}": kernels_launched(lambda: compiled(x))}
        del x
    # The sweep's smallest inputs (4096 x 64) are 0.5-1 MB: timed after a read flush (see offshape_bench), since
    # do_bench's write flush leaves L2 dirty and adds several µs to kernels this short.
    widths = [2**k for k in range(6, 15)]
    sweep = {}
    for dtype in (torch.float32, torch.float16):
        name = dtypes.torch_name(dtype)
        sweep[name] = {"triton": [], "torch": []}
        for w in progress(widths, f"softmax sweep ({name})"):
            x = torch.randn(4096, w, device="cuda", dtype=dtype)
            nbytes = 2 * x.numel() * x.element_size()
            sweep[name]["triton"].append(bench(softmax, x, bytes=nbytes, flush_l2="read", rep_ms=30).gbps)
            sweep[name]["torch"].append(bench(torch.softmax, x, -1, bytes=nbytes, flush_l2="read", rep_ms=30).gbps)
            kernels[name][f"4096x{w}"] = kernels_launched(lambda: torch.softmax(x, dim=-1))
    f32, f16 = figures["float32"], figures["float16"]
    return {"shape": [rows, cols], **figures, "torch_softmax_kernels": kernels, "compile_mode": "default",
            "sweep": {"rows": 4096, "widths": widths, "gbps": sweep, "timing": "bench(flush_l2='read')"},
            "targets": [
                target("softmax fp32 8192x8192 / copy bandwidth", f32["triton_gbps"] / f32["copy_gbps"], 0.85),
                target("softmax fp16 8192x8192 / copy bandwidth", f16["triton_gbps"] / f16["copy_gbps"], 0.85),
                target("softmax fp32 / torch.softmax", f32["triton_gbps"] / f32["torch_gbps"], 1.4),
                target("softmax fp16 / torch.softmax", f16["triton_gbps"] / f16["torch_gbps"], 2.5),
                target("softmax fp32 / torch.compile", f32["triton_gbps"] / f32["compile_gbps"], 1.0),
                target("softmax fp16 / torch.compile", f16["triton_gbps"] / f16["compile_gbps"], 1.0),
            ]}


matmul_dtype = dtypes.tensor_core_16bit  # bf16, or fp16 on a T4 (saying so): the matmul benchmarks


@register("triton05_matmul")
def matmul_bench() -> dict:
    """The workbook's matmul (and, on GPUs with tensor descriptors, the lesson's Hopper kernel) against cuBLAS, bf16
    (fp16 on a GPU without bf16 tensor cores: :func:`matmul_dtype`).

    Compute-bound timings wander with the clocks, so the 8192³ figures are timed after :func:`settle`, in 300 ms
    windows, five rounds taken in turns (median of the rounds' medians). The fused epilogue is
    :func:`fused_epilogue_bench`'s.
    """
    import torch

    from . import hopper_matmul

    matmul = solutions()["matmul"]
    m = n = k = 8192
    low = matmul_dtype()
    timed = dict(dtype=low.torch, rep_ms=300)
    a = torch.randn(m, k, device="cuda", dtype=low.torch)
    b = torch.randn(k, n, device="cuda", dtype=low.torch)
    hopper_missing = hopper_matmul.unsupported(a, b)
    kernels = {"triton": matmul, **({} if hopper_missing else {"triton hopper": hopper_matmul.matmul})}
    for fn in kernels.values():
        torch.testing.assert_close(fn(a[:512], b), torch.matmul(a[:512], b), rtol=2e-2, atol=1.0)
        fn(a, b)  # autotune before the clocks are settled and timing starts
    settle(lambda: torch.matmul(a, b))  # compute-bound: reach steady clocks before timing
    plain = {name: (lambda fn=fn: fn(a, b)) for name, fn in kernels.items()}
    mm = interleaved({**plain, "cuBLAS": lambda: torch.matmul(a, b)}, rounds=5, flops=2 * m * n * k, **timed)
    a = b = None  # free the buffers (the timed lambdas above are done)
    sizes = [512, 1024, 2048, 4096, 8192]  # (3072 and 6144 dropped to pay for the fused-epilogue rounds)
    sweep = {name: [] for name in [*kernels, "cuBLAS"]}
    for s in progress(sizes, "matmul sweep"):
        x = torch.randn(s, s, device="cuda", dtype=low.torch)
        y = torch.randn(s, s, device="cuda", dtype=low.torch)
        for name, fn in [*kernels.items(), ("cuBLAS", torch.matmul)]:
            sweep[name].append(bench(fn, x, y, flops=2 * s**3, dtype=low.torch).tflops)
    out = {"shape": [m, n, k], "dtype": low.dtype, "dtype_note": low.note, "timing": "settle, then 5 interleaved rounds of 300 ms",
           "hopper_kernel": None if hopper_missing else "gpucourse.lessons.l05_triton.hopper_matmul",
           "hopper_unavailable_because": hopper_missing,
           "tflops": {name: r.typical.tflops for name, r in mm.items()},
           "sweep": {"sizes": sizes, "tflops": sweep}}
    targets = [target(f"matmul {low.short} 8192^3 / cuBLAS (workbook kernel)",
                      out["tflops"]["triton"] / out["tflops"]["cuBLAS"], 0.95)]
    if not hopper_missing:
        targets.append(target(f"matmul {low.short} 8192^3 / cuBLAS (Hopper kernel)",
                              out["tflops"]["triton hopper"] / out["tflops"]["cuBLAS"], 0.95))
    out["targets"] = targets
    return out


def rotation(names: list, rnd: int) -> list:
    """The order of round ``rnd``: ``names`` rotated left by ``rnd``, so each one comes first in turn."""
    k = rnd % len(names) if names else 0
    return list(names[k:]) + list(names[:k])


def rotated_rounds(fns: dict, rounds: int, timer=None, **bench_kwargs) -> dict:
    """Like :func:`gpucourse.timing.interleaved` (each round times every function once; returns ``name -> Rounds``),
    but round ``r`` runs them in :func:`rotation` order ``r``, so that no function always runs first after a change
    of clocks or always right after the same neighbour. ``timer`` (default :func:`gpucourse.timing.bench`) is
    called as ``timer(fn, name=name, **bench_kwargs)``."""
    from gpucourse.timing import Rounds

    timer = timer or bench
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    runs = {name: [] for name in fns}
    for rnd in range(rounds):
        for name in rotation(list(fns), rnd):
            runs[name].append(timer(fns[name], name=name, **bench_kwargs))
    return {name: Rounds(results) for name, results in runs.items()}


FUSED_SHAPES = [(8192, 8192, 8192), (8192, 8192, 2048), (4096, 4096, 1024)]
ROUNDS = 7  # rounds of the fused-epilogue benchmark: every contender once per round (at 8192³ three rounds left
# one contender's range wider than the differences between contenders; seven take about 3 s more per shape)


@register("triton05_fused_epilogue")
def fused_epilogue_bench() -> dict:
    """``silu(a @ b + bias)`` in bf16: our fused kernels against what a practitioner writes, and each epilogue's
    cost measured against its own plain matmul.

    Contenders per shape (M, N, K): the workbook's matmul and the Hopper kernel, each with the bias and SiLU in its
    epilogue AND the same kernel without it (its "plain" matmul); cuBLAS's plain matmul (``torch.matmul``);
    ``F.silu(torch.addmm(bias, a, b))`` (cuBLASLt adds the bias in its own epilogue: two kernels); and
    ``torch.compile`` of the unfused code (default mode; max-autotune is not tried here, it autotunes for minutes
    at these shapes: lesson 09's ``compile09_epilogue`` times it at 8192³). Timed after :func:`settle`, in
    ``ROUNDS`` rounds, each timing every contender once (50 ms, do_bench's L2 flush), the order rotated by one from
    round to round so that no contender always follows the same neighbour or comes first after a clock change.
    Reported per contender: the median of the rounds' medians and the rounds' range. The epilogue's cost is
    ``fused - own plain`` for our kernels, ``practitioner - cuBLAS plain`` for torch's. ``torch.compile`` is code
    the course does not control: the lesson runs this benchmark in a child process
    (:func:`gpucourse.benchmarks.run_in_child`).
    """
    import time

    import torch
    import torch.nn.functional as F

    from . import hopper_matmul

    matmul = solutions()["matmul"]

    def unfused(a, b, bias):
        return F.silu(torch.matmul(a, b) + bias)

    compiled = torch.compile(unfused, dynamic=False)
    low = matmul_dtype()
    out = {"dtype": low.dtype, "dtype_note": low.note, "compile_mode": "default",
           "timing": f"settle, then {ROUNDS} rounds of 50 ms, every contender once per round, order rotated",
           "shapes": {}, "first_call_s": {}}
    settled = False
    for m, n, k in progress(FUSED_SHAPES, "fused epilogue shapes"):
        a = torch.randn(m, k, device="cuda", dtype=low.torch)
        b = torch.randn(k, n, device="cuda", dtype=low.torch)
        bias = torch.randn(n, device="cuda", dtype=low.torch)
        fns = {"workbook fused": lambda: matmul(a, b, bias, "silu"),
               "workbook plain": lambda: matmul(a, b)}
        if not hopper_matmul.unsupported(a, b):
            fns["Hopper fused"] = lambda: hopper_matmul.matmul(a, b, bias, "silu")
            fns["Hopper plain"] = lambda: hopper_matmul.matmul(a, b)
        fns.update({"cuBLAS plain": lambda: torch.matmul(a, b),
                    "addmm + silu": lambda: F.silu(torch.addmm(bias, a, b)),
                    "torch.compile": lambda: compiled(a, b, bias)})
        want = unfused(a, b, bias)
        t0 = time.perf_counter()
        for name, fn in fns.items():  # compiles and autotunes every contender before timing starts
            got = fn()
            if "plain" not in name:
                torch.testing.assert_close(got, want, rtol=2e-2, atol=1.0)
        torch.cuda.synchronize()
        out["first_call_s"][f"{m}x{n}x{k}"] = time.perf_counter() - t0
        if not settled:
            settle(lambda: torch.matmul(a, b), seconds=1.0)
            settled = True
        r = rotated_rounds(fns, ROUNDS, rep_ms=50, flops=2 * m * n * k, dtype=low.torch)
        ms = {name: rr.median_ms for name, rr in r.items()}
        ours = min((x for x in ("workbook fused", "Hopper fused") if x in ms), key=ms.get)
        theirs = min(("addmm + silu", "torch.compile"), key=ms.get)
        epilogue = {"addmm + silu": ms["addmm + silu"] - ms["cuBLAS plain"],
                    "torch.compile": ms["torch.compile"] - ms["cuBLAS plain"],
                    "workbook fused": ms["workbook fused"] - ms["workbook plain"]}
        if "Hopper fused" in ms:
            epilogue["Hopper fused"] = ms["Hopper fused"] - ms["Hopper plain"]
        out["shapes"][f"{m}x{n}x{k}"] = {
            "m": m, "n": n, "k": k, "ms": ms,
            "rounds_ms": {name: rr.medians_ms for name, rr in r.items()},
            "spread_ms": {name: max(rr.medians_ms) - min(rr.medians_ms) for name, rr in r.items()},
            "best_ours": ours, "best_practitioner": theirs,
            "speedup_vs_best_practitioner": ms[theirs] / ms[ours],
            # what bias + SiLU add over the plain matmul each one builds on: ours over our own plain kernel,
            # torch's over cuBLAS's plain matmul
            "epilogue_ms": epilogue}
        a = b = bias = None  # free the buffers (the timed lambdas above are done)
    s = out["shapes"]
    out["targets"] = [
        target(f"fused matmul+bias+silu / best of addmm+silu and torch.compile ({low.short} 8192^3)",
               s["8192x8192x8192"]["speedup_vs_best_practitioner"], 1.0),
        target(f"fused matmul+bias+silu / best of addmm+silu and torch.compile ({low.short} 8192x8192, K=2048)",
               s["8192x8192x2048"]["speedup_vs_best_practitioner"], 1.1),
        target(f"fused matmul+bias+silu / best of addmm+silu and torch.compile ({low.short} 4096x4096, K=1024)",
               s["4096x4096x1024"]["speedup_vs_best_practitioner"], 1.0),
    ]
    return out


SOFTMAX_SHAPES = [(65536, 128, "bfloat16"), (32768, 1000, "float16"), (1, 100000, "float32")]
MATMUL_SHAPES = [(1000, 1000, 1000), (16, 8192, 8192)]
MATMUL_SWEEP = [(1, 8192, 8192), (256, 8192, 8192), (2000, 2000, 2000)]
# Issue #33's small and odd GEMMs, each with its goal for the better of the lesson's two kernels against cuBLAS, timed
# on the GPU alone (calls replayed from a CUDA graph, so the host's launch cost drops out).
SMALL_GEMMS = [((1000, 1000, 1000), 0.85), ((3000, 5000, 2000), 0.85), ((2048, 2048, 8192), 0.85),
               ((16, 8192, 8192), 0.85), ((4096, 4096, 4096), 0.95)]


def _graph_us(fn, calls: int = 20) -> float:
    """µs per call of ``fn`` replayed ``calls`` times from one CUDA graph, the best of 10 replays (L2 warm)."""
    from gpucourse.timing import event_times, graph_repeat

    return min(event_times(graph_repeat(fn, calls, fallback=False), reps=10, warmup=2)) / calls * 1e3


def small_gemm_lines(result: dict) -> list:
    """The lines the lesson prints for a :func:`small_gemms_bench` result (measured here or recorded): per shape,
    each contender's µs per call and the better lesson kernel's ratio to cuBLAS, then the targets."""
    from gpucourse.benchmarks import format_targets

    lines = []
    for shape, r in result["shapes"].items():
        g = r["graph_us"]
        lines.append(f"{shape:<16} " + ", ".join(f"{name} {us:7.1f} µs" for name, us in g.items())
                     + f" -> {r['best']} {r['vs_cuBLAS']:.2f}x cuBLAS (goal {r['goal']})")
    return lines + format_targets(result).splitlines()


@register("triton05_small_gemms")
def small_gemms_bench() -> dict:
    """:data:`SMALL_GEMMS` (issue #33): the workbook's ``matmul``, the Hopper kernel where the GPU has tensor
    descriptors, and cuBLAS, each checked against cuBLAS, then replayed from CUDA graphs in three interleaved rounds
    (median); the target is on the better of the two lesson kernels. Run by ``gpucourse bench`` (the GPU suite), not
    by the notebook: compiling and autotuning both kernels at these shapes would take the lesson's Restart & Run All
    past its budget, so the lesson prints the recorded run."""
    import statistics

    import torch

    from . import hopper_matmul

    matmul = solutions()["matmul"]
    low = matmul_dtype()
    out = {"timing": "CUDA graphs of 20 calls, best of 10 replays (L2 warm); median of 3 interleaved rounds",
           "dtype": low.dtype, "dtype_note": low.note, "shapes": {}}
    for (m, n, k), goal in progress(SMALL_GEMMS, "small GEMMs in CUDA graphs"):
        a = torch.randn(m, k, device="cuda", dtype=low.torch)
        b = torch.randn(k, n, device="cuda", dtype=low.torch)
        want = torch.matmul(a, b)
        fns = {"workbook": lambda: matmul(a, b), "cuBLAS": lambda: torch.matmul(a, b)}
        if not hopper_matmul.unsupported(a, b):
            fns["hopper"] = lambda: hopper_matmul.matmul(a, b)
        for name, fn in fns.items():  # also the autotuning, before any capture
            torch.testing.assert_close(fn(), want, rtol=2e-2, atol=2e-2 * float(want.abs().max()), msg=name)
        us = {name: [] for name in fns}
        for _ in range(3):
            for name, fn in fns.items():
                us[name].append(_graph_us(fn))
        med = {name: statistics.median(v) for name, v in us.items()}
        best = min((name for name in med if name != "cuBLAS"), key=med.get)
        out["shapes"][f"{m}x{n}x{k}"] = {"graph_us": med, "best": best, "vs_cuBLAS": med["cuBLAS"] / med[best],
                                         "goal": goal, "tflops": {nm: 2 * m * n * k / v / 1e6 for nm, v in med.items()}}
        a = b = want = None  # free the buffers (the timed lambdas above are done)
    out["targets"] = [target(f"matmul {low.short} {shape} / cuBLAS, the better lesson kernel ({r['best']}), CUDA graphs",
                             r["vs_cuBLAS"], r["goal"]) for shape, r in out["shapes"].items()]
    return out


def _host_us_per_call(fn, calls: int = 100) -> float:
    """Host time to issue one call, the GPU not waited for in between (the launch cost a fast kernel hides behind)."""
    import time

    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return host


@register("triton05_offshape")
def offshape_bench() -> dict:
    """The workbook's softmax and matmul on shapes far from the 8192-wide benchmark ones (issue #18), against torch
    in the same run.

    Softmax: 65536x128 bf16 (narrow rows), 32768x1000 fp16 (a width that is not a multiple of 16), 1x100000 fp32
    (one row too wide for one program), each against ``torch.softmax`` and a copy of the same bytes (bf16 shapes in
    fp16 on a GPU without bf16 tensor cores: :func:`matmul_dtype`). Matmul bf16:
    1000³ (too few large tiles to fill the GPU, strides not multiples of 16) and 16x8192x8192 (a few rows: memory
    bound), against cuBLAS, with the host cost per call and the GPU time per call replayed from a CUDA graph; then
    a sweep of other skinny and small shapes. Protocol: ``bench(flush_l2="read")`` (L2 evicted by reading 256 MB
    before each repeat, which leaves no dirty lines for the timed kernel to write back), three interleaved rounds of
    50 ms, median of the rounds' medians.
    """
    import torch

    sol = solutions()
    softmax, matmul = sol["softmax"], sol["matmul"]
    read = dict(flush_l2="read", rep_ms=50)
    low = matmul_dtype()  # bf16 shapes run in fp16 on a GPU without bf16 (a T4), and the output says so
    out = {"protocol": "bench(flush_l2='read'), 3 interleaved rounds of 50 ms; sweep: one bench of 30 ms each",
           "dtype_note": low.note, "softmax": {}, "matmul": {}, "matmul_sweep": {}}
    for rows, cols, dt in progress(SOFTMAX_SHAPES, "off-shape softmax"):
        dt = low.dtype if dt == "bfloat16" else dt
        dtype = getattr(torch, dt)
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        dst = torch.empty_like(x)
        tol = {} if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-4)
        torch.testing.assert_close(softmax(x), torch.softmax(x.float(), dim=-1).to(dtype), **tol)
        r = interleaved({"triton": lambda: softmax(x), "torch": lambda: torch.softmax(x, dim=-1),
                         "copy": lambda: dst.copy_(x)}, rounds=3, bytes=2 * x.numel() * x.element_size(), **read)
        us = {name: rr.median_ms * 1e3 for name, rr in r.items()}
        out["softmax"][f"{rows}x{cols} {dt}"] = {"us": us, "vs_torch": us["torch"] / us["triton"],
                                                 "vs_copy": us["copy"] / us["triton"]}
        x = dst = None  # free the buffers (the timed lambdas above are done)
    kernel = sol["matmul_kernel"]
    for m, n, k in progress(MATMUL_SHAPES, "off-shape matmul"):
        a = torch.randn(m, k, device="cuda", dtype=low.torch)
        b = torch.randn(k, n, device="cuda", dtype=low.torch)
        torch.testing.assert_close(matmul(a, b), torch.matmul(a, b), rtol=2e-2, atol=1.0)
        fns = {"triton": lambda: matmul(a, b), "cuBLAS": lambda: torch.matmul(a, b)}
        r = interleaved(fns, rounds=3, flops=2 * m * n * k, dtype=low.torch, **read)
        us = {name: rr.median_ms * 1e3 for name, rr in r.items()}
        graph = {name: _graph_us(fn) for name, fn in fns.items()}
        out["matmul"][f"{m}x{n}x{k} {low.dtype}"] = {
            "us": us, "vs_cuBLAS": us["cuBLAS"] / us["triton"], "tflops": {nm: rr.typical.tflops for nm, rr in r.items()},
            "host_us_per_call": {name: _host_us_per_call(fn) for name, fn in fns.items()},
            "graph_us_per_call": graph, "graph_vs_cuBLAS": graph["cuBLAS"] / graph["triton"],
            "config": str(getattr(kernel, "best_config", None))}
        a = b = None  # free the buffers (the timed lambdas above are done)
    for m, n, k in progress(MATMUL_SWEEP, "off-shape matmul sweep"):
        a = torch.randn(m, k, device="cuda", dtype=low.torch)
        b = torch.randn(k, n, device="cuda", dtype=low.torch)
        matmul(a, b)  # autotune outside the timing
        t = {name: bench(fn, a, b, flush_l2="read", rep_ms=30).median_ms * 1e3
             for name, fn in (("triton", matmul), ("cuBLAS", torch.matmul))}
        out["matmul_sweep"][f"{m}x{n}x{k}"] = {"us": t, "vs_cuBLAS": t["cuBLAS"] / t["triton"],
                                               "config": str(getattr(kernel, "best_config", None))}
        a = b = None  # free the buffers (the timed lambdas above are done)
    s, mm = out["softmax"], out["matmul"]
    out["targets"] = [
        target(f"softmax 65536x128 {low.short} / torch.softmax", s[f"65536x128 {low.dtype}"]["vs_torch"], 1.0),
        target(f"softmax 65536x128 {low.short} / copy", s[f"65536x128 {low.dtype}"]["vs_copy"], 0.7),
        target("softmax 32768x1000 fp16 / copy", s["32768x1000 float16"]["vs_copy"], 0.9),
        target("softmax 1x100000 fp32 / torch.softmax", s["1x100000 float32"]["vs_torch"], 1.0),
        target(f"matmul {low.short} 1000^3 / cuBLAS", mm[f"1000x1000x1000 {low.dtype}"]["vs_cuBLAS"], 0.8),
        target(f"matmul {low.short} 16x8192x8192 / cuBLAS", mm[f"16x8192x8192 {low.dtype}"]["vs_cuBLAS"], 0.9),
    ]
    return out
