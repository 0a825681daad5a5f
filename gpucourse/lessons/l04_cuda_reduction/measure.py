"""Lesson 04: the reduction ladder against torch.sum and the copy ceiling, and sum_many against its alternatives.

The ladder's kernels come from ``reduction_kernels`` (shared with the notebook); ``block_sum`` and
``sum_many`` are the reference solutions of ``solutions/04_cuda_reduction.ipynb`` (the one place they live). Every
ratio is measured within one run, timed the same way by ``gpucourse.timing.bench``. The lesson draws its tables and
plots from what these functions return.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from gpucourse import device, timeline
from gpucourse.solutions import for_lesson
from gpucourse.timing import bench, copy_gbps

from . import LESSON

LADDER_N = 2**28  # 1 GiB of float32
ATOMIC_N = 2**24  # step 1 (one atomic per element) is timed on 64 MiB: on 1 GiB it would take far longer
SEED_CASE = {"count": 2000, "min_len": 1_000, "max_len": 200_000}  # stand-in for the talk's case (it gives no sizes): ~800 MB
RANDOM_CASE = {"count": 2000, "min_len": 1, "max_len": 200_000}  # issue #18's shape: sizes from 1 float up
SMALL_CASE = {"count": 2000, "min_len": 500, "max_len": 1_500}  # ~1k floats each: launch overhead dominates
FEW_LARGE_CASE = {"count": 8, "min_len": 2**22, "max_len": 2**24}  # a few tensors of millions: one block each would
# leave most of the GPU idle
CASES = {"seed_case": SEED_CASE, "random_case": RANDOM_CASE, "small_case": SMALL_CASE,
         "few_large_case": FEW_LARGE_CASE}
CASE_TITLES = {"seed_case": "seed case (2000 tensors, 1k-200k floats)",
               "random_case": "random sizes (2000 tensors, 1-200k floats)",
               "small_case": "small tensors (2000 tensors, ~1k floats)",
               "few_large_case": "a few large tensors (8 tensors, 4M-16M floats)"}
# torch.compile specializes on every input's shape: with 2000 tensors of different lengths it generates and compiles
# thousands of kernels (many minutes). It is timed on the first COMPILE_COUNT tensors, next to the Python loop on the
# same tensors, which is enough to see whether it helps.
COMPILE_COUNT = 200


solutions = for_lesson(LESSON)  # the solved workbook's namespace, loaded on the first call


AHEAD = ("ladder", "block_sum", "sum_many")  # the extensions the cells after the ReLU build
_ahead: list = []  # the background builds started by build_ahead() in this process


def build_ahead() -> list:
    """Start compiling the CUDA extensions of this lesson's later cells (``AHEAD``: the ladder's kernels and the
    workbook's block_sum and sum_many), each in a background process, so that they compile side by side while the
    cells in between run: on a machine that has not built them before, each is ~35 s of compiling that the ladder
    and sum_many cells would otherwise do one after the other. A cell that needs one before its process is done
    waits for torch's build lock in the build directory, then only loads it; a compile error there is met again
    and shown by the cell itself. GPU mode only; returns the processes (none in CPU mode or when already started)."""
    if not device.on_gpu() or _ahead:
        return []
    from gpucourse.workbooks import ROOT  # the folder holding the package: importable by a fresh interpreter

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    for what in AHEAD:
        code = f"from {__name__} import _build_one; _build_one({what!r})"
        _ahead.append(subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return list(_ahead)


def wait_for_builds(timeout: float = 600) -> None:
    """Wait for build_ahead()'s processes to end, so nothing compiles beside a timing."""
    for proc in _ahead:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def _build_one(what: str) -> None:
    """Build (and once call, on 8 floats) one of ``AHEAD``; what a background process of build_ahead() runs."""
    import torch

    from . import reduction_kernels as rk

    if what == "ladder":
        rk.build()
        return
    x = torch.ones(8, device="cuda")
    fn = solutions()[what]
    if what == "block_sum":
        fn(x)
    else:
        fn([x, x[:3]])
    torch.cuda.synchronize()


def ladder(n: int = LADDER_N) -> dict:
    """GB/s of each ladder step, the workbook's block_sum, torch.sum and a copy, on ``n`` float32 values."""
    import torch

    from . import reduction_kernels as rk

    wait_for_builds()
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


def atomics_sweep(n: int = LADDER_N, step: int = 4, per_sm=(0, 32, 256, 2048, 8192)) -> list:
    """The same grid-stride kernel (``step`` 4: 4-byte loads) on ``n`` floats with ever larger grids: each block adds
    its partial with one atomic on the one output address, so the grid size is the number of atomics. 0 is the
    ladder's own grid (as many blocks as fit at once); a grid is never larger than one element per thread, which is
    step 3's grid. GB/s of each."""
    import torch

    from . import reduction_kernels as rk

    x = torch.rand(n, device="cuda") - 0.25
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    fit = rk.blocks_per_sm(step)
    rows = []
    for k in per_sm:
        blocks = min(sms * (k or fit), -(-n // rk.THREADS))
        r = bench(rk.ladder_sum, x, step, k, bytes=4 * n, name=f"{blocks} blocks")
        rows.append({"blocks_per_sm": k or fit, "blocks": blocks, "atomics": blocks,
                     "elements_per_thread": n / (blocks * rk.THREADS), "ms": r.median_ms, "gbps": r.gbps})
    return rows


def misaligned_check(n: int = 2**20 + 3) -> list:
    """Steps 4 and 5 and the workbook's block_sum on views that start 0-3 floats into their storage (x[k:]: 16-byte
    aligned only for k = 0): each result against float64 torch.sum. GPU."""
    import torch

    from . import reduction_kernels as rk

    base = torch.rand(n, device="cuda") - 0.25
    out = []
    for k in range(4):
        v = base[k:]
        want = float(v.double().sum())
        got = {f"step {s}": float(rk.ladder_sum(v, s)) for s in (4, 5)}
        got["block_sum"] = float(solutions()["block_sum"](v))
        out.append({"offset_bytes": 4 * k, "address_mod_16": v.data_ptr() % 16,
                    "max_rel_error": max(abs(g - want) for g in got.values()) / float(v.abs().sum())})
    return out


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
    mine = methods["sum_many (one CUDA launch)"]
    rows["sum_many (one CUDA launch)"]["host_ms"] = host_call_ms(mine, ts)
    return {"count": len(ts), "bytes": nbytes, "rows": rows}


def host_call_ms(fn, *args, reps: int = 20) -> float:
    """Median ms that one call of ``fn(*args)`` keeps the CPU, started on an idle GPU (synchronized before each call,
    not after it): what the call costs the host, its kernel not included unless it waits for it."""
    import torch

    fn(*args)
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        samples.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return sorted(samples)[len(samples) // 2]


def time_cases(cases=None, compile_in: str = "seed_case") -> dict:
    """``time_many`` on each case of ``CASES`` (or the keys given), ``torch.compile`` timed in ``compile_in`` only."""
    wait_for_builds()
    return {key: dict(time_many(CASES[key], with_compile=key == compile_in), case=CASES[key])
            for key in (cases or CASES)}


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
