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

from gpucourse import device
from gpucourse.timing import bench, copy_gbps, graph_repeat, settle

QUICK = {"warmup_ms": 1, "rep_ms": 5, "min_reps": 2}  # for tests: the code path, not the figures


def solutions() -> dict:
    from gpucourse.solutions import cached_solutions
    from . import LESSON

    return cached_solutions(LESSON.notebook)




def working_set(sizes=None, bench_kw=None) -> dict:
    """Copy bandwidth against working-set size (bytes read + written), L2 left warm between repeats.

    A working set that fits in L2 is served from it after the first pass; a larger one streams from device memory.
    Each timed call repeats the copy enough times to move at least 256 MiB, inside a CUDA graph on a GPU.
    """
    import torch

    bench_kw = dict(bench_kw or {})
    if sizes is None:
        sizes = [2**k for k in range(16, 33)]  # 64 KiB .. 4 GiB
        if device.on_gpu():
            free, _ = torch.cuda.mem_get_info()
            sizes = [s for s in sizes if s < 0.8 * free]
    gbps, reps_used = [], []
    for ws in sizes:
        n = max(1, ws // 8)  # two float32 buffers of n elements: ws bytes in all
        src = torch.randn(n, device=device.torch_device())
        dst = torch.empty_like(src)
        reps = max(1, min(1024, 2**28 // ws))
        fn = graph_repeat(lambda: dst.copy_(src), reps)
        r = bench(fn, bytes=reps * 2 * n * 4, flush_l2=False, name=f"copy ws={ws}", **bench_kw)
        gbps.append(r.gbps)
        reps_used.append(reps)
        del src, dst, fn
    p = device.props()
    return {"sizes": list(sizes), "gbps": gbps, "reps": reps_used, "l2_bytes": p.l2_bytes if p else None,
            "device": p.name if p else "cpu"}


ACCESS_CASES = (("coalesced", 1), ("strided", 2), ("strided", 4), ("strided", 8), ("strided", 32), ("random", 1))


def access_patterns(n: int = 2**23, src_len: int = 2**28, cases=ACCESS_CASES, bench_kw=None) -> dict:
    """GB/s of useful bytes (n float32 read + n written) for each read pattern, by torch and by a Triton kernel.

    ``src_len`` (a power of two, >= n * the largest stride) is the source buffer's length: the random pattern reads
    n of its elements scattered over all of it. The model column is the fraction of each 32-byte sector used.
    """
    import torch

    from . import access

    bench_kw = dict(bench_kw or {})
    need = max(n * s for _, s in cases)
    if src_len < need or src_len & (src_len - 1):
        raise ValueError(f"src_len must be a power of two >= {need}")
    src = torch.randn(src_len, device=device.torch_device())
    rows = []
    for pattern, stride in cases:
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
            "torch_gbps": bench(torch_fn, bytes=8 * n, name=f"torch {label}", **bench_kw).gbps,
            "triton_gbps": bench(access.read_pattern, src, n, pattern, stride, bytes=8 * n, name=f"triton {label}",
                                 **bench_kw).gbps,
        })
    return {"n": n, "src_len": src_len, "rows": rows}


# ---------------------------------------------------------------------------------------------------------------------
# Roofline points.


def default_ops(scale: str = "gpu") -> list:
    """The lesson's operations: elementwise, a reduction, a GEMV and GEMMs of several shapes (small ones on CPU)."""
    from gpucourse import roofline as R

    if scale == "cpu":
        return [R.elementwise(2**16, "float32", name="relu"),
                R.elementwise(2**16, "float32", inputs=2, name="add"),
                R.reduction(256, 256, "float32", name="row sum"),
                R.gemv(256, 256, "bfloat16", name="GEMV"),
                R.gemm(256, 32, 256, "bfloat16"), R.gemm(256, 256, 256, "bfloat16")]
    return [R.elementwise(2**28, "float32", name="relu"),
            R.elementwise(2**28, "float32", inputs=2, name="add"),
            R.reduction(16384, 16384, "float32", name="row sum"),
            R.gemv(16384, 16384, "bfloat16", name="GEMV"),
            R.gemm(8192, 128, 8192, "bfloat16"), R.gemm(8192, 1024, 8192, "bfloat16"),
            R.gemm(4096, 4096, 4096, "bfloat16"), R.gemm(8192, 8192, 8192, "bfloat16")]


def runner(op):
    """A zero-argument callable that performs ``op`` with torch on fresh random data on this session's device."""
    import torch

    dt = getattr(torch, op.dtype)
    dev, p = device.torch_device(), op.params
    if op.kind == "elementwise":
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
    """Measured seconds for ``op`` (median, L2 flushed between repeats on a GPU)."""
    fn = runner(op)
    if op.kind == "gemm" and device.on_gpu():
        settle(fn, seconds=1.0)  # compute-bound: steady clocks first
    r = bench(fn, bytes=op.bytes, flops=op.flops, dtype=op.dtype, name=op.name, **dict(bench_kw or {}))
    return r.median_ms / 1e3


def roofline_points(ceilings, ops=None, bench_kw=None) -> list:
    """For each op: measured time, the roofline's predicted time on ``ceilings``, its bound and measured/predicted."""
    from gpucourse import roofline as R

    ops = ops if ops is not None else default_ops("gpu" if device.on_gpu() else "cpu")
    points = []
    for op in ops:
        secs = measure_op(op, bench_kw)
        pred = R.predict(op, ceilings)
        points.append({"op": op, "name": op.name, "intensity": op.intensity, "flops": op.flops, "bytes": op.bytes,
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
    """
    import torch

    from . import fusion as F

    bench_kw = dict(bench_kw or {})
    compile = device.on_gpu() if compile is None else compile
    dtype = torch.float32
    out = {}
    for name, (args, eager, fused, numel) in _chains(rows, cols, n, dtype).items():
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


def roofline_result(ceilings, points) -> dict:
    """The JSON-able record of a roofline measurement: the ceilings used and each point without its op object."""
    return {"ceilings": {"gbps": ceilings.gbps, "tflops": ceilings.tflops, "dtype": ceilings.dtype,
                         "source": ceilings.source, "ops_per_byte": ceilings.ops_per_byte},
            "points": [{k: v for k, v in p.items() if k != "op"} for p in points]}
