"""Lesson 03's registered benchmarks (GPU only): the figures and targets in benchmarks/results/<gpu>.json, measured by
the same functions of ``measure`` that the notebook calls."""
from __future__ import annotations

from gpucourse.benchmarks import register, target

from .measure import access_patterns, fusion, roofline_points, roofline_result, working_set


def _working_set_figures(res) -> list:
    """Adds the L2 plateau and the device-memory floor to ``res``; no target (the lesson shows the curve)."""
    l2 = res.get("l2_bytes") or 0
    inside = [g for s, g in zip(res["sizes"], res["gbps"]) if 2**22 <= s <= l2 // 2]
    outside = [g for s, g in zip(res["sizes"], res["gbps"]) if s >= 8 * l2]
    if inside and outside:
        res["l2_plateau_gbps"], res["hbm_gbps"] = max(inside), min(outside)
        res["l2_over_hbm"] = max(inside) / min(outside)
    return []


@register("memory03_working_set", targets=_working_set_figures)
def working_set_bench() -> dict:
    return working_set()


def _access_figures(res) -> list:
    base = res["rows"][0]["triton_gbps"]
    for row in res["rows"]:
        row["triton_vs_coalesced"] = row["triton_gbps"] / base
    return []


@register("memory03_access", targets=_access_figures)
def access_bench() -> dict:
    return access_patterns()


def _roofline_targets(res) -> list:
    return [target(f"{p['name']}: measured / predicted time (memory-bound)", p["measured_over_predicted"], 1.25,
                   "<=") for p in res["points"] if p["bound"] == "memory"]


@register("memory03_roofline", targets=_roofline_targets)
def roofline_bench() -> dict:
    from gpucourse import roofline as R

    c = R.measured_ceilings()
    return roofline_result(c, roofline_points(c))


def _fusion_targets(res) -> list:
    sw = res["swish_residual"]
    return [target("fused swish_residual (Triton, fp32 2^26) / copy bandwidth", sw["triton"]["gbps"] / sw["copy_gbps"],
                   0.9),
            target("fused swish_residual: eager time / Triton time", sw["eager"]["ms"] / sw["triton"]["ms"], 2.0)]


@register("memory03_fusion", targets=_fusion_targets)
def fusion_bench() -> dict:
    return fusion()
