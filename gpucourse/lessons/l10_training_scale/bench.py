"""Lesson 10's registered benchmark: the memory budget of a training step of the lesson's transformer, predicted on
paper (budget.py) against the allocator's measurement, and the step time, in each precision and checkpointing mode.
The notebook measures it in its own cells and records it; ``gpucourse bench memory10_budget`` runs the same function.
The multi-GPU figures come from ``python -m gpucourse.lessons.l10_training_scale.multi_gpu`` (a machine with 2+
GPUs), not from here.
"""
from __future__ import annotations

import gc

from gpucourse.benchmarks import register, target
from gpucourse.progress import progress

from . import budget, model

def modes(low: str = "bf16") -> dict:
    """The modes measured, name -> config changes: fp32, ``low`` autocast ("bf16"; "fp16", with a GradScaler, on a
    GPU without bf16 tensor cores: :func:`model.mixed_precision`), each with MLPs or blocks checkpointed, and fp32
    with blocks checkpointed."""
    mixed = {"bf16": "bf16 autocast", "fp16": "fp16 autocast + GradScaler"}
    if low not in mixed:
        raise ValueError(f"low must be 'bf16' or 'fp16', not {low!r}")
    return {"fp32": dict(precision="fp32", checkpoint="none"),
            mixed[low]: dict(precision=low, checkpoint="none"),
            f"{low}, MLPs checkpointed": dict(precision=low, checkpoint="mlp"),
            f"{low}, blocks checkpointed": dict(precision=low, checkpoint="block"),
            "fp32, blocks checkpointed": dict(precision="fp32", checkpoint="block")}



def mixed_name(res: dict) -> str:
    """The name of ``res``'s mixed-precision mode without checkpointing (the lesson's baseline row)."""
    return next(name for name, p in res["points"].items()
                if p["config"]["precision"] != "fp32" and p["config"]["checkpoint"] == "none")


def budget_result(base: dict | None = None, timed: bool = True) -> dict:
    """Per mode (:func:`modes` for this GPU's 16-bit type): the measured budget (and peak), the prediction, and (GPU,
    ``timed``) the step's median ms."""
    from gpucourse import device

    base = model.config(base)
    points = {}
    for name, mode in progress(modes(model.mixed_precision()).items(), "memory budget, per mode"):
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
