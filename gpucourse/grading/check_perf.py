"""Speed (GPU only), reported apart from correctness: the timed step's inputs drawn on the CPU, moved to the GPU
with a first call made, then the submission timed against the spec's baseline (a torch copy of the same bytes, or
the reference). The batch grader runs the three steps under different holds of the GPU lock (gpulock.py)."""
from __future__ import annotations

import torch

from .. import device as _device
from .check_cases import new_seed, value_to


def draw_perf(ex) -> list | None:
    """The timed step's inputs, drawn on the CPU (2^28 floats take seconds there); None in CPU mode or without a
    target. The grader asks for this holding no GPU lock: it touches no GPU."""
    if ex.perf is None or not _device.on_gpu():
        return None
    gen = torch.Generator().manual_seed(new_seed())
    make_inputs = ex.perf.make_inputs or ex.make_inputs  # a judged exercise's Perf gives its own
    return list(make_inputs(ex.perf.params, gen))


def prepare_perf(ex, fn=None, drawn: list | None = None) -> dict | None:
    """The timed step's inputs (``drawn`` by :func:`draw_perf`, or drawn now) moved to the GPU, and ``fn`` called once
    on them (its compiles and first-call allocations happen here); None in CPU mode or without a target. The grader
    asks for this under the GPU's *shared* lock and for :func:`measure_perf` under the exclusive one, so none of this
    stops every other job's cases while a timing waits."""
    if ex.perf is None or not _device.on_gpu():
        return None
    dev = _device.torch_device()
    args = [a.to(dev) if isinstance(a, torch.Tensor) else value_to(a, dev)
            for a in (drawn if drawn is not None else draw_perf(ex))]
    nbytes = ex.perf.bytes(*args) if ex.perf.bytes else None
    nflops, dtype = None, None
    if ex.perf.flops:  # declared flops are held to the tensor-core peak of the inputs' dtype (above it: suspicious)
        nflops = ex.perf.flops(*args)
        dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)
        if dtype == torch.float32 and getattr(ex, "tf32_possible", False):
            dtype = "tf32"
    if fn is not None:
        fn(*args)
        torch.cuda.synchronize()
    return {"args": args, "bytes": nbytes, "flops": nflops, "dtype": dtype}


def measure_perf(ex, fn, prepared: dict | None = None) -> dict | None:
    """Time ``fn`` against the spec's baseline on this GPU (on ``prepared``'s inputs, from :func:`prepare_perf`, or on
    inputs drawn now); None in CPU mode or without a target."""
    if ex.perf is None or not _device.on_gpu():
        return None
    from .. import timing

    prepared = prepared or prepare_perf(ex)
    args, nbytes, nflops, dtype = prepared["args"], prepared["bytes"], prepared["flops"], prepared["dtype"]
    flush = ex.perf.flush_l2
    mine = timing.bench(fn, *args, bytes=nbytes, flops=nflops, dtype=dtype, name=ex.function, flush_l2=flush)
    if ex.perf.baseline == "copy":
        # A torch copy that reads and writes nbytes in all, like the kernel (copy_gbps counts read + written).
        base_gbps = timing.copy_gbps(max(1, int(nbytes or 0) // 2), flush_l2=flush)
        ratio = (mine.gbps or 0) / (base_gbps or float("inf"))
        what = f"{mine.gbps:,.0f} GB/s = {ratio:.2f}x a torch copy of the same bytes ({base_gbps:,.0f} GB/s)"
    else:
        base = timing.bench(ex.reference, *args, bytes=nbytes, name="reference", flush_l2=flush)
        ratio = base.median_ms / mine.median_ms
        what = f"{ratio:.2f}x the speed of the reference ({mine.median_ms:.3f} ms vs {base.median_ms:.3f} ms)"
    pct = mine.pct_of_peak_bw if mine.pct_of_peak_bw is not None else mine.pct_of_peak_flops
    return {"ratio": ratio, "target": ex.perf.target, "met": ratio >= ex.perf.target,
            "suspicious": mine.suspicious, "text": f"{what}; target >= {ex.perf.target:g}x",
            "warnings": list(mine.warnings),
            # the spread of the submission's own times and its share of the ceiling: the leaderboard's ties
            "ms": mine.median_ms, "q25_ms": mine.q25_ms, "q75_ms": mine.q75_ms, "pct_of_peak": pct}
