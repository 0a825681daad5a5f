"""Lesson 04's registered benchmarks (GPU only), measured by the same functions of ``measure`` that the notebook
calls."""
from __future__ import annotations

from gpucourse.benchmarks import register, target

from .measure import SEED_CASE, SMALL_CASE, ladder, time_many


def _ladder_targets(res) -> list:
    rows = res["rows"]
    return [target("block_sum / torch.sum bandwidth (1 GiB fp32)",
                   rows["block_sum (workbook)"]["gbps"] / rows["torch.sum"]["gbps"], 0.95)]


@register("cuda04_ladder", targets=_ladder_targets)
def ladder_bench() -> dict:
    return {"rows": ladder()}


def _sum_many_targets(res) -> list:
    r = res["seed_case"]["rows"]
    mine = r["sum_many (one CUDA launch)"]["ms"]
    return [target("sum_many time / one torch.sum over the concatenation",
                   mine / r["one torch.sum over the concatenation"]["ms"], 1.15, "<="),
            target("Python loop time / sum_many time", r["Python loop of t.sum()"]["ms"] / mine, 100),
            target("_foreach_norm time / sum_many time", r["torch._foreach_norm"]["ms"] / mine, 20)]


@register("cuda04_sum_many", targets=_sum_many_targets)
def sum_many_bench() -> dict:
    return {"seed_case": dict(time_many(SEED_CASE), case=SEED_CASE),
            "small_case": dict(time_many(SMALL_CASE, with_compile=False), case=SMALL_CASE)}
