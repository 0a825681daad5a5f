"""Lesson 04's registered benchmarks (GPU only), measured by the same functions of ``measure`` that the notebook
calls."""
from __future__ import annotations

from gpucourse.benchmarks import register, target

from .measure import atomics_sweep, ladder, time_cases


def _ladder_targets(res) -> list:
    rows = res["rows"]
    return [target("block_sum / torch.sum bandwidth (1 GiB fp32)",
                   rows["block_sum (workbook)"]["gbps"] / rows["torch.sum"]["gbps"], 0.95)]


@register("cuda04_ladder", targets=_ladder_targets)
def ladder_bench() -> dict:
    return {"rows": ladder(), "atomics_sweep": atomics_sweep()}


def _sum_many_targets(res) -> list:
    """Issue #18's targets for the 800 MB cases (the talk's stand-in and sizes from 1 float up): at least 0.87x the
    speed of one torch.sum over the same bytes (time at most 1.15x), 100x the Python loop, 20x _foreach_norm; for a
    few large tensors the first only. Each case the result holds gets its targets."""
    out = []
    for key, suffix, full in (("seed_case", "", True), ("random_case", " (sizes 1-200k)", True),
                              ("few_large_case", " (8 tensors of millions)", False)):
        if key not in res:
            continue
        r = res[key]["rows"]
        mine = r["sum_many (one CUDA launch)"]["ms"]
        out.append(target(f"sum_many time / one torch.sum over the concatenation{suffix}",
                          mine / r["one torch.sum over the concatenation"]["ms"], 1.15, "<="))
        if full:
            out += [target(f"Python loop time / sum_many time{suffix}", r["Python loop of t.sum()"]["ms"] / mine, 100),
                    target(f"_foreach_norm time / sum_many time{suffix}", r["torch._foreach_norm"]["ms"] / mine, 20)]
    return out


@register("cuda04_sum_many", targets=_sum_many_targets)
def sum_many_bench() -> dict:
    return time_cases()
