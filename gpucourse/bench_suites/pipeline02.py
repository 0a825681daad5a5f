"""Lessons 01 and 02: latency vs throughput, timing mistakes, host-device copies, launch overhead, the training loop.

Each benchmark calls the same function from gpucourse.pipeline that the notebooks call.
"""
from __future__ import annotations

from .. import pipeline
from ..benchmarks import register, target


@register("pipeline01_crossover", lesson="01")
def crossover() -> dict:
    return {"matmul": pipeline.crossover("matmul"), "add": pipeline.crossover("add")}


@register("pipeline01_timing_pairs", lesson="01")
def timing_pairs() -> dict:
    pairs = pipeline.timing_pairs()
    return {"pairs": pairs,
            "targets": [target(f"{p['mistake']}: wrong/right differ by > 10%",
                               abs(p["wrong_ms"] / p["right_ms"] - 1), 0.10) for p in pairs]}


@register("pipeline02_h2d", lesson="02")
def h2d() -> dict:
    res = pipeline.h2d_bandwidth()
    ratio = res["pinned, non_blocking"]["gbps"] / res["pageable"]["gbps"]
    return dict(res, targets=[target("pinned/pageable bandwidth", ratio, 1.5)])


@register("pipeline02_overlap", lesson="02")
def overlap() -> dict:
    res = pipeline.copy_compute_overlap()
    return dict(res, targets=[target("overlapped speedup over one stream", res["speedup"], 1.1)])


@register("pipeline02_launch_overhead", lesson="02")
def launch_overhead() -> dict:
    res = pipeline.launch_overhead()
    return dict(res, targets=[target("CUDA graph speedup per kernel", res["graph_speedup"], 2.0)])


@register("pipeline02_training_loop", lesson="02")
def training_loop() -> dict:
    res = pipeline.training_loop_study()
    fixed = res["rows"]["3: pinned + non_blocking"]
    return dict(res, targets=[target("fixed loop speedup over naive", fixed["speedup_vs_naive"], 1.2),
                              target("fixed loop GPU idle fraction", fixed["gpu_idle_fraction"], 0.5, "<=")])
