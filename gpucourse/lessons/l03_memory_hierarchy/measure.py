"""Lesson 03: the memory hierarchy and the roofline, measured.

Four measurements, each a plain function the lesson calls for its plots and a registered benchmark calls at full
size: bandwidth against working-set size (:func:`working_set`), access patterns (:func:`access_patterns`), roofline
points with predicted against measured times (:func:`roofline_points`) and fusion (:func:`fusion`: eager torch,
``torch.compile`` and one Triton kernel for three memory-bound chains). The exercise's fused kernel is loaded from
``solutions/03_memory_hierarchy.ipynb``, the one place it lives.

The functions take their sizes as arguments and run in CPU mode too (host timer, no CUDA graph, no torch.compile), so
the tests can run them small; only the GPU's figures mean anything.
"""
from __future__ import annotations

import functools

from gpucourse import device, dtypes
from gpucourse.progress import progress
from gpucourse.solutions import for_lesson
from gpucourse.timing import bench, copy_gbps, graph_repeat, interleaved, settle

from . import LESSON

QUICK = {"warmup_ms": 1, "rep_ms": 5, "min_reps": 2}  # for tests: the code path, not the figures

solutions = for_lesson(LESSON)  # the solved workbook's namespace, loaded on the first call


def _captured(fn, reps: int):
    """``fn`` repeated ``reps`` times in one CUDA graph (a plain loop in CPU mode), captured with
    ``capture_error_mode="thread_local"``: in a Jupyter kernel other threads live beside the cell's (ipykernel's I/O
    and heartbeat), and only the capturing thread's own calls should be able to break the capture."""
    if not device.on_gpu():
        return graph_repeat(fn, reps)
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # compile and warm outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(reps):
            fn()
    return graph.replay


def working_set(sizes=None, bench_kw=None, graph_memcpy: bool = False, eager_from: int = 2**26) -> dict:
    """Copy bandwidth against working-set size (bytes read + written), L2 left warm between repeats.

    A working set that fits in L2 is served from it after the first pass; a larger one streams from device memory.
    The copy is a Triton kernel (``access.copy``); each timed call repeats it enough times to move at least 256 MiB,
    captured in one CUDA graph on a GPU, so the CPU's launch gaps are not timed. ``kernel_us`` is the time of one
    copy: at small sizes it stops falling with the size, a fixed cost per kernel (start, run, finish), not a
    memory latency. From ``eager_from`` bytes up, torch's eager ``dst.copy_(src)`` is timed too, one call per repeat
    (long enough that launch gaps do not matter): the baseline a practitioner would use. ``graph_memcpy`` also times
    ``copy_`` captured in a CUDA graph, where it becomes a memcpy node, not a kernel: on the course's H100 that path
    ran about 20% slower from 1 GiB up (``lab/README.md``, explore_memory03), so the sweep times a
    kernel instead.
    """
    import torch

    from . import access

    bench_kw = {"flush_l2": False, **dict(bench_kw or {})}
    if sizes is None:
        sizes = [2**k for k in range(16, 32)]  # 64 KiB .. 2 GiB
        if device.on_gpu():
            free, _ = torch.cuda.mem_get_info()
            sizes = [s for s in sizes if s < 0.5 * free]
    out = {"sizes": list(sizes), "gbps": [], "kernel_us": [], "reps": [], "copy_gbps": [], "graph_memcpy_gbps": []}
    for ws in progress(sizes, "working-set sweep", label=lambda ws: f"{ws:,} B"):
        n = max(1, ws // 8)  # two float32 buffers of n elements: ws bytes in all
        src = torch.randn(n, device=device.torch_device())
        dst = torch.empty_like(src)
        reps = max(1, min(1024, 2**28 // ws))
        fn = _captured(lambda: access.copy(src, dst), reps)
        r = bench(fn, bytes=reps * 2 * n * 4, name=f"copy kernel ws={ws}", **bench_kw)
        out["gbps"].append(r.gbps)
        out["kernel_us"].append(r.median_ms * 1e3 / reps)
        out["reps"].append(reps)
        eager = None
        if ws >= eager_from:
            eager = bench(dst.copy_, src, bytes=2 * n * 4, name=f"copy_ ws={ws}", **bench_kw).gbps
        out["copy_gbps"].append(eager)
        if graph_memcpy:
            g = _captured(lambda: dst.copy_(src), reps)
            out["graph_memcpy_gbps"].append(bench(g, bytes=reps * 2 * n * 4, name=f"graph copy_ ws={ws}",
                                                  **bench_kw).gbps)
            del g
        src = dst = fn = None  # free the buffers (the timed lambdas above are done)
    if not graph_memcpy:
        del out["graph_memcpy_gbps"]
    p = device.props()
    out.update({"l2_bytes": p.l2_bytes if p else None, "device": p.name if p else "cpu",
                "protocol": "Triton copy kernel repeated in a CUDA graph, L2 not flushed; copy_: eager, one call per "
                            "repeat"})
    return out


ACCESS_CASES = (("coalesced", 1), ("strided", 2), ("strided", 4), ("strided", 8), ("strided", 16), ("strided", 32),
                ("random", 1))


def access_patterns(n: int = 2**23, src_len: int = 2**28, cases=ACCESS_CASES, bench_kw=None) -> dict:
    """GB/s of useful bytes (n float32 read + n written) for each read pattern, by torch and by a Triton kernel.

    ``src_len`` (a power of two, >= n * the largest stride) is the source buffer's length: the random pattern reads
    n of its elements scattered over all of it. ``model_efficiency`` is the fraction of each 32-byte sector used by
    the reads; ``model_fraction`` (and ``model_fraction_64``, with 64-byte fetches) the fraction of the coalesced
    rate that the kernel should keep once its coalesced writes are counted too (``access.predicted_fraction``).
    Each kernel moves tens of MB (tens of µs): timed with L2 flushed by a read (``bench(flush_l2="read")``).
    """
    import torch

    from . import access

    bench_kw = {"flush_l2": "read", **dict(bench_kw or {})}
    need = max(n * s for _, s in cases)
    if src_len < need or src_len & (src_len - 1):
        raise ValueError(f"src_len must be a power of two >= {need}")
    src = torch.randn(src_len, device=device.torch_device())
    rows = []
    for pattern, stride in progress(cases, "access patterns"):
        label = pattern if pattern != "strided" else f"stride {stride}"
        want = access.read_pattern_torch(src, n, pattern, stride)
        got = access.read_pattern(src, n, pattern, stride)
        if not torch.equal(got, want):
            raise AssertionError(f"read_pattern({pattern}, {stride}) disagrees with torch")
        if pattern == "random":
            idx = (torch.arange(n, device=src.device, dtype=torch.int64) * access._MULT) % src_len
            torch_fn = functools.partial(torch.index_select, src, 0, idx)
        else:
            view = src[: (n - 1) * stride + 1: stride]
            out = torch.empty(n, device=src.device)
            torch_fn = functools.partial(out.copy_, view)
        offs = access.offsets(pattern, 4096, stride, src_len)
        rows.append({
            "pattern": label, "stride": stride,
            "model_efficiency": access.efficiency(offs), "sectors_per_warp": access.sectors_per_warp(offs),
            "model_fraction": access.predicted_fraction(offs),
            "model_fraction_64": access.predicted_fraction(offs, fetch_bytes=64),
            "torch_gbps": bench(torch_fn, bytes=8 * n, name=f"torch {label}", **bench_kw).gbps,
            "triton_gbps": bench(access.read_pattern, src, n, pattern, stride, bytes=8 * n, name=f"triton {label}",
                                 **bench_kw).gbps,
        })
    base = rows[0]["triton_gbps"]
    for row in rows:
        row["triton_vs_coalesced"] = row["triton_gbps"] / base
    return {"n": n, "src_len": src_len, "rows": rows, "protocol": "bench(flush_l2='read'), median"}


# ---------------------------------------------------------------------------------------------------------------------
# Ceilings: memory, tensor cores and CUDA cores, measured together.

FMA_N, FMA_ITERS, SIN_K = 2**22, 256, 64


class SMClockSampler:
    """Reads the SM clock (``nvidia-smi --query-gpu=clocks.sm``) on a background thread, as often as nvidia-smi
    answers (tens of ms a call), while the GPU works: ``mark(label)`` starts a new phase, ``phases()`` gives each
    phase's readings in MHz. Best effort: without nvidia-smi, or where it fails, every phase is empty. Reading the
    clock costs host time only; the GPU's work is not paused for it."""

    def __init__(self):
        import threading

        self._samples, self._phase, self._stop, self._started = [], None, threading.Event(), False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._id = None
        try:
            import torch

            uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
            self._id = f"GPU-{uuid}" if uuid is not None else str(torch.cuda.current_device())
        except Exception:  # noqa: BLE001 -- best effort: no clock readings
            self._id = None

    def _read(self) -> float | None:
        from gpucourse import nvidia_smi

        if self._id is None:
            return None
        text = nvidia_smi.run.__wrapped__("--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", self._id)
        try:
            return float(text.strip().splitlines()[0])
        except (AttributeError, IndexError, ValueError):
            return None

    def _run(self):
        while not self._stop.is_set():
            phase, mhz = self._phase, self._read()
            if mhz is None:
                return
            if phase is not None and phase == self._phase:  # a reading that straddles a mark is dropped
                self._samples.append((phase, mhz))

    def mark(self, label: str):
        self._phase = label
        if not self._started:
            self._started = True
            self._thread.start()

    def stop(self):
        self._phase = None
        self._stop.set()
        self._thread.join(timeout=5)

    def phases(self) -> dict:
        out = {}
        for phase, mhz in self._samples:
            out.setdefault(phase, []).append(mhz)
        return out


def ceilings(rounds: int = 5, rep_ms: float = 100, copy_elems: int = 2**28) -> tuple:
    """Measure the three ceilings the roofline uses and return ``(Ceilings, details)``. GPU only.

    Memory: a 1 GiB float32 copy (``copy_``, 2 GiB moved), L2 flushed by a read. Math, with lesson 05's interleaved
    protocol (``gpucourse.timing.interleaved``): after one second of settling, ``rounds`` rounds each time a bf16
    8192^3 matmul (tensor cores; fp16 on a GPU without bf16 ones, a T4: :func:`matmul_dtype`), a chain of fp32 FMAs
    (CUDA cores; ``compute.fma_chain``) and a chain of ``sin`` over the same elements (``compute.sin_chain``), each
    over ``rep_ms``, with L2 flushed by a read before each repeat, as :func:`roofline_points` times its operations.
    (On the course's H100 the first round, right after the back-to-back settle, ran at 606.5 TFLOP/s with the SM clock
    at a median 1,470 MHz during the settle, the flush-paused rounds at 774.0-785.9 with 1,965 MHz: results/h100.json,
    memory03_roofline; our reading: the flush's short pauses let the clocks stay higher under the power cap.) The
    ceilings are the medians
    of the rounds' medians; ``details`` keeps every round, so the spread is in view, and what one ``sin`` costs in FMA
    issue slots. ``details["sm_mhz_settle"]`` and ``["sm_mhz_rounds"]``: SM clock readings (MHz, nvidia-smi, sampled
    on a thread; empty where it cannot be read) during the back-to-back settle and during the interleaved rounds.
    """
    import statistics

    import torch

    from gpucourse import roofline as R
    from . import compute

    device.require_gpu("Measuring the ceilings")
    x = torch.empty(copy_elems, device="cuda").uniform_()
    y = torch.empty_like(x)
    cp = bench(y.copy_, x, bytes=2 * x.numel() * 4, flush_l2="read", name="copy 1 GiB")
    del x, y
    m = 8192
    low = matmul_dtype()  # bf16; fp16 on a GPU without bf16 tensor cores (a T4), printed: the ceiling is fp16's
    a = torch.randn(m, m, device="cuda", dtype=low.torch)
    b = torch.randn(m, m, device="cuda", dtype=low.torch)
    v = torch.randn(FMA_N, device="cuda")
    mm_name = f"{low.short} matmul 8192^3"
    fns = {mm_name: lambda: torch.matmul(a, b),
           "fp32 FMA chain": lambda: compute.fma_chain(v, FMA_ITERS),
           f"sin x{SIN_K}": lambda: compute.sin_chain(v, SIN_K)}
    clocks = SMClockSampler()
    clocks.mark("settle")  # back to back, no flush: the sustained regime
    settle(fns[mm_name], seconds=1.0)
    clocks.mark("rounds")  # interleaved, with an L2-flush read before each repeat
    res = interleaved(fns, rounds=rounds, rep_ms=rep_ms, flush_l2="read")
    clocks.stop()
    sm_mhz = clocks.phases()
    mm_flops, fma_flops = 2 * m**3, compute.fma_flops(FMA_N, FMA_ITERS)
    mm_tf = [mm_flops / (ms * 1e-3) / 1e12 for ms in res[mm_name].medians_ms]
    fma_tf = [fma_flops / (ms * 1e-3) / 1e12 for ms in res["fp32 FMA chain"].medians_ms]
    slots = [compute.slots_per_sin(s_ms, SIN_K, f_ms, FMA_ITERS) for s_ms, f_ms in
             zip(res[f"sin x{SIN_K}"].medians_ms, res["fp32 FMA chain"].medians_ms)]
    name = device.props().name
    tc, cc = statistics.median(mm_tf), statistics.median(fma_tf)
    c = R.Ceilings(gbps=cp.gbps, tflops=tc, fp32_tflops=cc, measured=True, dtype=low.dtype,
                   source=f"measured on {name}: copy {cp.gbps:,.0f} GB/s, {low.short} matmul {tc:,.0f} TFLOP/s, "
                          f"fp32 FMA {cc:,.1f} TFLOP/s (medians of {rounds} interleaved rounds)")
    details = {"copy_gbps": cp.gbps, "copy_ms": cp.median_ms, "rounds": rounds, "rep_ms": rep_ms,
               "matmul_dtype": low.dtype, "matmul_tflops_rounds": mm_tf, "fp32_fma_tflops_rounds": fma_tf,
               "sin_slots_rounds": slots, "sin_slots": statistics.median(slots),
               "sin_ms_rounds": res[f"sin x{SIN_K}"].medians_ms, "fma_n": FMA_N, "fma_iters": FMA_ITERS,
               "sin_k": SIN_K,
               "sm_mhz_settle": sm_mhz.get("settle", []), "sm_mhz_rounds": sm_mhz.get("rounds", []),
               "protocol": "timing.interleaved after settle(1 s), flush_l2='read'; copy: bench(flush_l2='read')"}
    return c, details


LATENCY_FOOTPRINTS = {"L1": 16 * 2**10, "L2": 4 * 2**20, "device memory": 256 * 2**20}


def onchip(bench_kw=None) -> dict:
    """Shared-memory read bandwidth (whole GPU) and the latency of one dependent load from shared memory, L1, L2 and
    device memory (pointer chases, ``onchip.chase``). GPU only (the kernels are CUDA C++ compiled by NVRTC)."""
    from . import onchip as O

    device.require_gpu("The shared-memory and latency microbenchmarks")
    lat = [dict(O.chase(0, shared=True), level="shared memory")]
    for level, fp in progress(LATENCY_FOOTPRINTS.items(), "latency chases"):
        lat.append(dict(O.chase(fp, cold=level == "device memory"), level=level))
    bw = O.smem_bandwidth(bench_kw=bench_kw)
    return {"latency": lat, "smem_bandwidth": bw,
            "protocol": "chase: one thread, clock64 around 4096 dependent loads, after 64 untimed; bandwidth: "
                        "bench(flush_l2=False), median"}


# ---------------------------------------------------------------------------------------------------------------------
# Roofline points.


# bf16, or fp16 on a T4 (saying so): the GEMMs and the tensor-core ceiling they are measured against
matmul_dtype = dtypes.tensor_core_16bit


def default_ops(scale: str = "gpu", sin_slots: float | None = None, props=None) -> list:
    """The lesson's operations: elementwise, a reduction, a GEMV and GEMMs of several shapes (small ones on CPU).
    ``sin_slots`` (FMA issue slots per ``sin``, measured by :func:`ceilings`): add the fused sin x4 kernel, counted
    in instructions (4 sines per element). The GEMV and GEMMs are in :func:`matmul_dtype` (bf16; fp16 on a T4), the
    dtype :func:`ceilings` measures the tensor cores in."""
    from gpucourse import roofline as R

    low = matmul_dtype(props, say=False).dtype
    if scale == "cpu":
        return [R.elementwise(2**16, "float32", name="relu"),
                R.elementwise(2**16, "float32", inputs=2, name="add"),
                R.reduction(256, 256, "float32", name="row sum"),
                R.gemv(256, 256, low, name="GEMV"),
                R.gemm(256, 32, 256, low), R.gemm(256, 256, 256, low)]
    sin4 = [] if sin_slots is None else [R.elementwise(2**26, "float32", flops_per_element=4, name="sin x4 (fused)",
                                                       instructions_per_element=4 * sin_slots)]
    return [R.elementwise(2**28, "float32", name="relu"),
            R.elementwise(2**28, "float32", inputs=2, name="add"), *sin4,
            R.reduction(16384, 16384, "float32", name="row sum"),
            R.gemv(16384, 16384, low, name="GEMV"),
            R.gemm(8192, 128, 8192, low), R.gemm(8192, 1024, 8192, low),
            R.gemm(4096, 4096, 4096, low), R.gemm(8192, 8192, 8192, low)]


def runner(op):
    """A zero-argument callable that performs ``op`` with torch on fresh random data on this session's device."""
    import torch

    dt = getattr(torch, op.dtype)
    dev, p = device.torch_device(), op.params
    if op.kind == "elementwise":
        if op.name.startswith("sin x4"):
            from .fusion import sin4_triton

            x = torch.randn(p["n"], device=dev, dtype=dt)
            return lambda: sin4_triton(x)
        if p["inputs"] == 1:
            x = torch.randn(p["n"], device=dev, dtype=dt)
            return lambda: torch.relu(x)
        if p["inputs"] == 2:
            x, y = (torch.randn(p["n"], device=dev, dtype=dt) for _ in range(2))
            return lambda: torch.add(x, y)
        raise ValueError("elementwise ops with 1 (relu) or 2 (add) inputs only")
    if op.kind == "reduction":
        x = torch.randn(p["rows"], p["cols"], device=dev, dtype=dt)
        return lambda: x.sum(dim=1)
    if op.kind == "gemv":
        a, v = torch.randn(p["M"], p["K"], device=dev, dtype=dt), torch.randn(p["K"], device=dev, dtype=dt)
        return lambda: torch.mv(a, v)
    if op.kind == "gemm":
        a = torch.randn(p["M"], p["K"], device=dev, dtype=dt)
        b = torch.randn(p["K"], p["N"], device=dev, dtype=dt)
        return lambda: torch.matmul(a, b)
    raise ValueError(f"no runner for kind {op.kind!r}")


def measure_op(op, bench_kw=None) -> float:
    """Measured seconds for ``op`` (median; on a GPU, L2 flushed by a read before each repeat: a write flush would
    add its write-back, about 10 µs on an H100, to every short memory-bound kernel)."""
    fn = runner(op)
    if op.kind == "gemm" and device.on_gpu():
        settle(fn, seconds=0.5)  # compute-bound: steady clocks first
    r = bench(fn, bytes=op.bytes, flops=op.flops, dtype=op.dtype, name=op.name,
              **{"flush_l2": "read", **dict(bench_kw or {})})
    return r.median_ms / 1e3


def kernel_launches(op) -> list:
    """The GPU kernels one call of ``op``'s runner launches (after a warm-up call), from a ``torch.profiler`` trace:
    ``[{"name", "grid", "block"}]``, grid and block as the trace's args give them (x, y, z), None where absent. GPU
    only. For a GEMM this shows which cuBLAS kernel the library picked and how many thread blocks it launched."""
    import json
    import os
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    device.require_gpu("Profiling a kernel's launch")
    fn = runner(op)
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        os.unlink(path)
    out = []
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") == "kernel":
            args = ev.get("args", {})
            out.append({"name": ev.get("name", "?"), "grid": args.get("grid"), "block": args.get("block")})
    return out


def roofline_points(ceilings, ops=None, bench_kw=None) -> list:
    """For each op: measured time, the roofline's predicted time on ``ceilings``, its bound and measured/predicted."""
    from gpucourse import roofline as R

    ops = ops if ops is not None else default_ops("gpu" if device.on_gpu() else "cpu")
    points = []
    for op in progress(ops, "roofline points", label=lambda op: op.name):
        secs = measure_op(op, bench_kw)
        pred = R.predict(op, ceilings)
        points.append({"op": op, "name": op.name, "intensity": op.intensity, "flops": op.flops, "bytes": op.bytes,
                       "instructions": op.instructions, "roof": pred.roof,
                       "bound": pred.bound, "seconds": secs, "predicted_seconds": pred.seconds,
                       "measured_over_predicted": secs / pred.seconds})
    return points


# ---------------------------------------------------------------------------------------------------------------------
# Fusion.


def _chains(rows: int, cols: int, n: int, dtype):
    """name -> (args, {variant: fn}, numel of the big tensors, element size)."""
    import torch

    from . import fusion as F

    dev = device.torch_device()
    x = torch.randn(n, device=dev, dtype=dtype)
    y = torch.randn(n, device=dev, dtype=dtype)
    xl = torch.randn(rows, cols, device=dev, dtype=dtype)
    r = torch.randn(rows, cols, device=dev, dtype=dtype)
    w = torch.randn(cols, device=dev, dtype=dtype)
    b = torch.randn(cols, device=dev, dtype=dtype)
    return {
        "sin4": ((x,), F.sin4_eager, F.sin4_triton, n),
        "ln_relu_add": ((xl, w, b, r), F.ln_relu_add_eager, F.ln_relu_add_triton, rows * cols),
        "swish_residual": ((x, y), F.swish_residual_eager, solutions()["fused_swish_residual"], n),
    }


def fusion(n: int = 2**26, rows: int = 16384, cols: int = 4096, compile: bool | None = None, bench_kw=None) -> dict:
    """Eager torch vs ``torch.compile`` vs one Triton kernel for sin x4, LayerNorm->ReLU->add and x*sigmoid(x)+y.

    Each variant's GB/s counts the *fused* bytes (the least any version must move), so the numbers compare times;
    ``bytes_moved`` says what each variant really moves. ``copy_gbps`` is a torch copy of that many bytes.
    ``compile``: time torch.compile too (default: on a GPU only; on the CPU it needs a C++ compiler and is slow).
    On a GPU, L2 is flushed by a read before each repeat (``bench_kw`` may say otherwise). The lesson runs this in a
    child process (``gpucourse.benchmarks.run_in_child("memory03_fusion")``): torch.compile is code the course does
    not control, and if it hangs or crashes there the notebook's kernel lives on.
    """
    import torch

    from . import fusion as F

    bench_kw = {"flush_l2": "read", **dict(bench_kw or {})}
    compile = device.on_gpu() if compile is None else compile
    dtype = torch.float32
    out = {}
    for name, (args, eager, fused, numel) in progress(_chains(rows, cols, n, dtype).items(), "fusion chains"):
        torch.testing.assert_close(fused(*args), eager(*args), rtol=1e-4, atol=1e-4)
        moved = F.traffic(name, numel, 4)
        variants = {"eager": eager, "triton": fused}
        res = {"numel": numel, "bytes_moved": {"eager": moved["eager"], "torch.compile": moved["fused"],
                                               "triton": moved["fused"]}}
        if compile:
            try:
                compiled = torch.compile(eager)
                torch.testing.assert_close(compiled(*args), eager(*args), rtol=1e-4, atol=1e-4)
                variants = {"eager": eager, "torch.compile": compiled, "triton": fused}
            except Exception as exc:  # report, don't lose the other figures
                res["compile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        for vname, fn in variants.items():
            r = bench(fn, *args, bytes=moved["fused"], name=f"{name} {vname}", **bench_kw)
            res[vname] = {"ms": r.median_ms, "gbps": r.gbps, "warnings": r.warnings}
        res["copy_gbps"] = copy_gbps(moved["fused"] // 2, **bench_kw)
        out[name] = res
    return out


def roofline_result(ceilings, points, details: dict | None = None) -> dict:
    """The JSON-able record of a roofline measurement: the ceilings used (and how they were measured, ``details``
    from :func:`ceilings`) and each point without its op object."""
    from gpucourse import roofline as R

    return {"ceilings": {"gbps": ceilings.gbps, "tflops": ceilings.tflops, "dtype": ceilings.dtype,
                         "fp32_tflops": ceilings.fp32_tflops, "source": ceilings.source,
                         "ops_per_byte": ceilings.ops_per_byte,
                         "cuda_core_ops_per_byte": R.cuda_core_ops_per_byte(ceilings), **(details or {})},
            "points": [{k: v for k, v in p.items() if k != "op"} for p in points]}
