"""The device's ceilings, and proof that gpucourse.timing.bench agrees with triton.testing.do_bench."""
from __future__ import annotations

import statistics

from gpucourse import dtypes
from gpucourse.benchmarks import register, target
from gpucourse.timing import Rounds, bench, settle


def _cv(xs) -> float:
    return statistics.stdev(xs) / statistics.mean(xs)


def _agreement(fn, label: str, rep_ms: float = 100, **decl) -> dict:
    """Five measurements by bench() and five by triton's do_bench over the same window (``rep_ms``), interleaved so
    both see the same clocks (as :func:`gpucourse.timing.interleaved` does, with do_bench as the second timer)."""
    import triton.testing

    settle(fn)
    ours, theirs = [], []
    for _ in range(5):
        ours.append(bench(fn, name=label, rep_ms=rep_ms, **decl))
        theirs.append(triton.testing.do_bench(fn, rep=rep_ms, return_mode="median"))
    ours = Rounds(ours)
    med_theirs = statistics.median(theirs)
    best = ours.typical
    return {"rep_ms": rep_ms, "bench_ms": ours.medians_ms, "do_bench_ms": theirs, "bench_median_ms": ours.median_ms,
            "do_bench_median_ms": med_theirs, "ratio": ours.median_ms / med_theirs, "cv_of_5": _cv(ours.medians_ms),
            "gbps": best.gbps, "tflops": best.tflops, "pct_of_peak_bw": best.pct_of_peak_bw,
            "pct_of_peak_flops": best.pct_of_peak_flops, "warnings": best.warnings}


# bf16, or fp16 on a T4 (saying so): the foundation matmul; result keys and target names carry it (matmul_bf16)
matmul_dtype = dtypes.tensor_core_16bit


@register("timing_agreement")
def timing_agreement() -> dict:
    import torch

    n = 2**28  # 1 GiB of fp32 per buffer
    x = torch.empty(n, device="cuda").uniform_()
    y = torch.empty_like(x)
    copy = _agreement(lambda: y.copy_(x), "copy 1 GiB", bytes=2 * n * 4)
    x = y = None  # free the buffers (the timed lambdas above are done)
    m = 8192
    low = matmul_dtype()
    a = torch.randn(m, m, device="cuda", dtype=low.torch)
    b = torch.randn(m, m, device="cuda", dtype=low.torch)
    mm = _agreement(lambda: torch.matmul(a, b), f"matmul {low.short} 8192³", flops=2 * m**3, dtype=low.torch)
    # A compute-bound kernel on a power-capped GPU: clocks wander on a scale longer than bench's default 100 ms
    # window (do_bench's too), so medians of separate windows differ by a few percent. A longer window averages
    # over that; both are recorded.
    mm_long = _agreement(lambda: torch.matmul(a, b), f"matmul {low.short} 8192³ (500 ms window)", rep_ms=500,
                         flops=2 * m**3, dtype=low.torch)
    return {
        "copy": copy, f"matmul_{low.short}": mm, f"matmul_{low.short}_500ms": mm_long, "dtype_note": low.note,
        "targets": [
            target("copy: |bench/do_bench - 1|", abs(copy["ratio"] - 1), 0.03, "<="),
            target("matmul: |bench/do_bench - 1|", abs(mm["ratio"] - 1), 0.03, "<="),
            target("matmul, 500 ms window: |bench/do_bench - 1|", abs(mm_long["ratio"] - 1), 0.03, "<="),
            target("copy: CV over 5 repeats", copy["cv_of_5"], 0.02, "<="),
            target("matmul: CV over 5 repeats (100 ms window)", mm["cv_of_5"], 0.02, "<="),
            target("matmul: CV over 5 repeats (500 ms window)", mm_long["cv_of_5"], 0.02, "<="),
            target("copy: fraction of datasheet bandwidth", (copy["pct_of_peak_bw"] or 0) / 100, 1.0, "<="),
            target(f"matmul: fraction of datasheet {low.short} peak", (mm["pct_of_peak_flops"] or 0) / 100, 1.0, "<="),
        ],
    }


@register("ceilings")
def ceilings() -> dict:
    """What `gpucourse doctor --measure` reports: measured copy bandwidth and matmul rate vs the datasheet."""
    from gpucourse.doctor import measure

    return measure()
