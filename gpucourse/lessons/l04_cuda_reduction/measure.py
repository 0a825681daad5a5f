"""Lesson 04: the reduction ladder against torch.sum and the copy ceiling, and sum_many against its alternatives.

The ladder's kernels come from ``reduction_kernels`` (shared with the notebook); ``block_sum`` and
``sum_many`` are the reference solutions of ``solutions/04_cuda_reduction.ipynb`` (the one place they live). Every
ratio is measured within one run, timed the same way by ``gpucourse.timing.bench``. The lesson draws its tables and
plots from what these functions return.
"""
from __future__ import annotations

import time

from gpucourse import timeline
from gpucourse.timing import bench, copy_gbps

LADDER_N = 2**28  # 1 GiB of float32
ATOMIC_N = 2**24  # step 1 (one atomic per element) is timed on 64 MiB: on 1 GiB it would take far longer
SEED_CASE = {"count": 2000, "min_len": 1_000, "max_len": 200_000}  # stand-in for the talk's case (it gives no sizes): ~800 MB
SMALL_CASE = {"count": 2000, "min_len": 500, "max_len": 1_500}  # ~1k floats each: launch overhead dominates
# torch.compile specializes on every input's shape: with 2000 tensors of different lengths it generates and compiles
# thousands of kernels (many minutes). It is timed on the first COMPILE_COUNT tensors, next to the Python loop on the
# same tensors, which is enough to see whether it helps.
COMPILE_COUNT = 200


def solutions() -> dict:
    from gpucourse.solutions import cached_solutions
    from . import LESSON

    return cached_solutions(LESSON.notebook)


def ladder(n: int = LADDER_N) -> dict:
    """GB/s of each ladder step, the workbook's block_sum, torch.sum and a copy, on ``n`` float32 values."""
    import torch

    from . import reduction_kernels as rk

    x = torch.rand(n, device="cuda") - 0.25
    want = float(x.double().sum())
    rows = {}
    for step, label in rk.STEPS.items():
        xs = x[:ATOMIC_N] if step == 1 else x
        got = float(rk.ladder_sum(xs, step))
        ref = want if step != 1 else float(xs.double().sum())
        assert abs(got - ref) <= 1e-4 * float(xs.abs().sum()), (step, got, ref)
        r = bench(rk.ladder_sum, xs, step, bytes=4 * xs.numel(), name=label)
        rows[f"{step}. {label}"] = {"n": xs.numel(), "ms": r.median_ms, "gbps": r.gbps}
    block_sum = solutions()["block_sum"]
    assert abs(float(block_sum(x)) - want) <= 1e-5 * float(x.abs().sum())
    for name, fn in (("block_sum (workbook)", block_sum), ("torch.sum", torch.sum)):
        r = bench(fn, x, bytes=4 * n, name=name)
        rows[name] = {"n": n, "ms": r.median_ms, "gbps": r.gbps}
    rows["copy (ceiling)"] = {"n": n, "ms": None, "gbps": copy_gbps(4 * n)}
    return rows


def make_tensors(case: dict, seed: int = 0) -> list:
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(case["min_len"], case["max_len"] + 1, (case["count"],), generator=gen).tolist()
    return [torch.rand(k, device="cuda") - 0.25 for k in lengths]


def many_methods(with_compile: bool = True) -> dict:
    """The ways to get every tensor's sum, each a function of the list of tensors."""
    import torch

    def python_loop(ts):
        return [t.sum() for t in ts]

    def stack_of_sums(ts):
        return torch.stack([t.sum() for t in ts])

    def foreach_norm(ts):  # the L1 norm: not the sum, but the same bytes read by torch's multi-tensor kernels
        return torch._foreach_norm(ts, 1)

    methods = {"Python loop of t.sum()": python_loop, "torch.stack of sums": stack_of_sums,
               "torch._foreach_norm": foreach_norm}
    if with_compile:
        methods["torch.compile(stack of sums)"] = torch.compile(stack_of_sums)
    methods["sum_many (one CUDA launch)"] = solutions()["sum_many"]
    return methods


def time_many(case: dict, with_compile: bool = True, compile_count: int = COMPILE_COUNT) -> dict:
    """Milliseconds of each method on ``case``, and of one torch.sum over the same bytes concatenated.

    torch.compile (``with_compile``) is timed on the first ``compile_count`` tensors only, together with the Python
    loop on those same tensors (``vs_loop_same_tensors``): see COMPILE_COUNT."""
    import torch

    ts = make_tensors(case)
    nbytes = 4 * sum(t.numel() for t in ts)
    want = torch.stack([t.double().sum() for t in ts]).float()
    rows = {}
    methods = many_methods(with_compile)
    for name, fn in methods.items():
        subset = ts[:compile_count] if name.startswith("torch.compile") else ts
        sub_bytes = 4 * sum(t.numel() for t in subset)
        try:
            t0 = time.perf_counter()
            out = fn(subset)  # the first call compiles (torch.compile, load_inline): timed apart
            first_s = time.perf_counter() - t0
            if name.startswith(("sum_many", "torch.stack", "torch.compile")):
                torch.testing.assert_close(out, want[:len(subset)], rtol=1e-5, atol=1e-3)
            r = bench(fn, subset, bytes=sub_bytes, name=name)
        except Exception as exc:  # torch.compile on many inputs may fail: report it, keep the others
            if name.startswith("sum_many"):
                raise
            rows[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            continue
        rows[name] = {"ms": r.median_ms, "gbps": r.gbps, "first_call_s": round(first_s, 2), "count": len(subset)}
        if len(subset) < len(ts):
            loop = bench(methods["Python loop of t.sum()"], subset, bytes=sub_bytes, name="loop on the subset")
            rows[name]["vs_loop_same_tensors"] = r.median_ms / loop.median_ms
    flat = torch.cat(ts)
    r = bench(torch.sum, flat, bytes=nbytes, name="one torch.sum over the concatenation")
    rows["one torch.sum over the concatenation"] = {"ms": r.median_ms, "gbps": r.gbps, "first_call_s": 0.0,
                                                    "count": 1}
    return {"count": len(ts), "bytes": nbytes, "rows": rows}


def busy_fraction(fn, *args) -> dict:
    """Wall time of one call (synchronized), GPU kernel time inside it, and their ratio, from the torch profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with timeline.quiet_profiler(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3
    kernels = [e for e in prof.events() if str(e.device_type).endswith("CUDA")]
    busy_ms = sum(e.time_range.elapsed_us() for e in kernels) / 1e3  # overlapping events would count twice: a
    # single stream runs one kernel at a time here, so they do not overlap
    return {"wall_ms": wall_ms, "gpu_busy_ms": busy_ms, "busy": busy_ms / wall_ms, "gpu_events": len(kernels)}
