"""Lesson 02's benchmarks: host-to-device copies, copy/compute overlap, launch overhead, the training loop.

Each benchmark calls the same function of ``measure`` that the notebook calls, and the notebook hands its results to
``gpucourse.benchmarks.record`` (the targets are registered apart for that).
"""
from __future__ import annotations

from gpucourse.benchmarks import register, target

from . import measure


def _h2d_targets(res):
    return [target("pinned/pageable bandwidth", res["pinned, non_blocking"]["gbps"] / res["pageable"]["gbps"], 1.5)]


@register("pipeline02_h2d", targets=_h2d_targets)
def h2d() -> dict:
    return measure.h2d_bandwidth()


@register("pipeline02_overlap",
          targets=lambda res: [target("overlapped speedup over one stream", res["speedup"], 1.1)])
def overlap() -> dict:
    return measure.copy_compute_overlap()


def _launch_targets(res):
    """Issue #18 asks for a 10x graph speedup per tiny kernel or the floor explained: the second target says how close
    the replay of the adds comes to the replay of empty kernels, the least a kernel in a graph costs on this GPU."""
    out = [target("CUDA graph speedup per kernel (tiny add)", res["graph_speedup"], 10.0)]
    if "empty_graph_us_per_kernel" in res:
        out.append(target("graph replay per add / per empty kernel (the floor)",
                          res["graph_us_per_kernel"] / res["empty_graph_us_per_kernel"], 1.5, "<="))
    return out


@register("pipeline02_launch_overhead", targets=_launch_targets)
def launch_overhead() -> dict:
    return measure.launch_overhead()


def _loop_targets(res):
    fixed = res["rows"]["3: pinned + non_blocking"]
    return [target("fixed loop speedup over naive", fixed["speedup_vs_naive"], 1.2),
            target("fixed loop GPU idle fraction", fixed["gpu_idle_fraction"], 0.5, "<=")]


@register("pipeline02_training_loop", targets=_loop_targets)
def training_loop() -> dict:
    return measure.training_loop_study()
