"""Lessons 01 and 02: latency vs throughput, timing mistakes, host-device copies, launch overhead, the training loop.

Each benchmark calls the same function from gpucourse.pipeline that the notebooks call, and the notebooks hand their
results to ``gpucourse.benchmarks.record`` (the targets are registered apart for that).
"""
from __future__ import annotations

from .. import pipeline
from ..benchmarks import register, target


@register("pipeline01_crossover", lesson="01")
def crossover() -> dict:
    return {"matmul": pipeline.crossover("matmul"), "add": pipeline.crossover("add")}


def _pair_target(p):
    """The wrong number must be off by at least 10% the way the mistake pushes it (a pair pointing the other way
    would teach the opposite of the lesson), or either way where that depends on the GPU."""
    try:
        way = pipeline.MISTAKE_DIRECTION[p["mistake"]]
    except KeyError:
        raise ValueError(f"unknown timing mistake {p['mistake']!r}: pipeline.MISTAKE_DIRECTION says which way each "
                         f"mistake errs, and has no entry for it") from None
    low, high = p["right_ms"] / p["wrong_ms"], p["wrong_ms"] / p["right_ms"]
    if way == "low":
        return target(f"{p['mistake']}: right/wrong (the wrong time reads too fast)", low, 1.1)
    if way == "high":
        return target(f"{p['mistake']}: wrong/right (the wrong time reads too slow)", high, 1.1)
    if way == "either":
        return target(f"{p['mistake']}: wrong and right differ, either way", max(low, high), 1.1)
    raise ValueError(f"MISTAKE_DIRECTION[{p['mistake']!r}] must be 'low', 'high' or 'either', not {way!r}")


def _pairs_targets(res):
    return [_pair_target(p) for p in res["pairs"]]


@register("pipeline01_timing_pairs", lesson="01", targets=_pairs_targets)
def timing_pairs() -> dict:
    return {"pairs": pipeline.timing_pairs()}


def _h2d_targets(res):
    return [target("pinned/pageable bandwidth", res["pinned, non_blocking"]["gbps"] / res["pageable"]["gbps"], 1.5)]


@register("pipeline02_h2d", lesson="02", targets=_h2d_targets)
def h2d() -> dict:
    return pipeline.h2d_bandwidth()


@register("pipeline02_overlap", lesson="02",
          targets=lambda res: [target("overlapped speedup over one stream", res["speedup"], 1.1)])
def overlap() -> dict:
    return pipeline.copy_compute_overlap()


@register("pipeline02_launch_overhead", lesson="02",
          targets=lambda res: [target("CUDA graph speedup per kernel", res["graph_speedup"], 2.0)])
def launch_overhead() -> dict:
    return pipeline.launch_overhead()


def _loop_targets(res):
    fixed = res["rows"]["3: pinned + non_blocking"]
    return [target("fixed loop speedup over naive", fixed["speedup_vs_naive"], 1.2),
            target("fixed loop GPU idle fraction", fixed["gpu_idle_fraction"], 0.5, "<=")]


@register("pipeline02_training_loop", lesson="02", targets=_loop_targets)
def training_loop() -> dict:
    return pipeline.training_loop_study()
