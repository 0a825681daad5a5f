"""Lesson 10's registered benchmark: the memory budget of a training step of the lesson's transformer, predicted on
paper (budget.py) against the allocator's measurement, and the step time, in each precision and checkpointing mode.
The notebook measures it in its own cells and records it; ``gpucourse bench memory10_budget`` runs the same function.
The multi-GPU figures come from ``benchmarks/multi_gpu10.py`` (a machine with 2+ GPUs), not from here.
"""
from __future__ import annotations

import gc

from gpucourse.benchmarks import register, target

from . import budget, model

MODES = {"fp32": dict(precision="fp32", checkpoint="none"),
         "bf16 autocast": dict(precision="bf16", checkpoint="none"),
         "bf16, MLPs checkpointed": dict(precision="bf16", checkpoint="mlp"),
         "bf16, blocks checkpointed": dict(precision="bf16", checkpoint="block"),
         "fp32, blocks checkpointed": dict(precision="fp32", checkpoint="block")}


def budget_result(base: dict | None = None, timed: bool = True) -> dict:
    """Per mode: the measured budget (and peak), the prediction, and (GPU, ``timed``) the step's median ms."""
    from gpucourse import device

    base = model.config(base)
    points = {}
    for name, mode in MODES.items():
        cfg = dict(base, **mode)
        measured = model.measure_budget(cfg)
        points[name] = {"config": cfg, "measured": measured, "predicted": budget.predict(cfg),
                        "predicted_peak": budget.predict_peak(cfg)}
        if timed and device.on_gpu():
            points[name]["step_ms"] = model.step_ms(cfg)
        gc.collect()
        if device.on_gpu():
            import torch

            torch.cuda.empty_cache()
    return {"config": base, "points": points}


def budget_targets(res: dict) -> list:
    out = []
    for name, p in res["points"].items():
        r = p["predicted_peak"]["peak"] / p["measured"]["peak"]
        out.append(target(f"{name}: predicted / measured peak memory, the larger over the smaller",
                          max(r, 1 / r), 1.10, "<="))
    return out


@register("memory10_budget", targets=budget_targets)
def budget_bench() -> dict:
    return budget_result()
