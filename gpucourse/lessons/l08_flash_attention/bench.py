"""Lesson 08's registered benchmarks. The notebook measures them in its own cells and hands each result to
``gpucourse.benchmarks.record``; ``gpucourse bench`` runs the same functions on its own. Every ratio is measured
within one run: the kernel and its peers timed the same way, in interleaved rounds.

The targets are set against cuDNN's fused attention, which SDPA itself picks on an H100, not against
FLASH_ATTENTION: that backend is FlashAttention-2's Ampere code (mma.sync, cp.async) running on a Hopper GPU, which
any Triton kernel that gets wgmma beats (the workbook's straightforward kernel too), so a target over it says
nothing about the kernel. Its ratio is still printed beside cuDNN's.
"""
from __future__ import annotations

from gpucourse.benchmarks import register, target

from . import measure

SHAPES = [(d, causal) for d in (64, 128) for causal in (False, True)]  # at fp16, B 4, H 16, S 4096
POINT = dict(b=4, h=16, s=4096)
# Issue #33's targets against cuDNN: the forward at least level with it at D 64 and 0.95 of its speed at D 128, the
# backward 0.8. On H100s the lesson's kernel reached 0.78-0.95x forward (its committed outputs and
# lab/results/h100-explore-attention-hopper.json) and, after its backward's loops lost their masks below the
# diagonal, 0.72-0.80x backward in one run of the lab: the targets the lesson cannot meet print MISSED, and the
# lesson shows what was tried and what a Hopper kernel needs beyond them (section 6).
FORWARD_VS_CUDNN = {64: 1.0, 128: 0.95}
FORWARD_VS_NAIVE = 4.0
BACKWARD_VS_CUDNN = 0.8


def _key(d: int, causal: bool) -> str:
    return f"D{d}{' causal' if causal else ''}"


def forward_result(rounds: int = 3) -> dict:
    return {"points": {_key(d, c): measure.forward_point(d=d, causal=c, rounds=rounds, **POINT) for d, c in SHAPES}}


def forward_from_sweep(rows: list) -> dict:
    """The :func:`forward_result` document read off a sweep (:func:`measure.forward_sweep`) that passed through
    B 4, H 16, S 4096 at both head dimensions, causal or not: the same interleaved measurement, not a second one."""
    points = {}
    for r in rows:
        if (r["b"], r["h"], r["s"]) == (POINT["b"], POINT["h"], POINT["s"]):
            points[_key(r["d"], r["causal"])] = dict(r, shape=dict(b=r["b"], h=r["h"], s=r["s"], d=r["d"],
                                                                   causal=r["causal"]))
    missing = [_key(d, c) for d, c in SHAPES if _key(d, c) not in points]
    if missing:
        raise ValueError(f"the sweep has no point at B {POINT['b']}, H {POINT['h']}, S {POINT['s']} for "
                         f"{', '.join(missing)}: sweep tokens = B * S = {POINT['b'] * POINT['s']} with S {POINT['s']}")
    return {"points": {_key(d, c): points[_key(d, c)] for d, c in SHAPES}, "from": "sweep"}


def forward_targets(res: dict) -> list:
    out = []
    for key, p in res["points"].items():
        ms = p["ms"]
        ours = ms[measure.OURS]
        if "SDPA CUDNN_ATTENTION" in ms:
            d = p["shape"]["d"]  # forward_point and forward_from_sweep both record the shape
            out.append(target(f"forward {key}: ours / SDPA CUDNN_ATTENTION (speed)", ms["SDPA CUDNN_ATTENTION"] / ours,
                              FORWARD_VS_CUDNN[d]))
        if "naive" in ms:
            out.append(target(f"forward {key}: ours / naive attention (speed)", ms["naive"] / ours, FORWARD_VS_NAIVE))
    return out


@register("flash08_forward", targets=forward_targets)
def forward_bench() -> dict:
    return forward_result()


def memory_targets(res: dict) -> list:
    return [target("peak extra memory at S=16384, D=128: ours / SDPA (its choice)",
                   res["ours (Triton)"] / res["SDPA (its choice)"], 1.1, "<=")]


@register("flash08_memory", targets=memory_targets)
def memory_bench() -> dict:
    return measure.memory()


def backward_result(rounds: int = 3) -> dict:
    return {"points": {_key(d, c): measure.backward_point(d=d, causal=c, rounds=rounds, **POINT) for d, c in SHAPES}}


def backward_targets(res: dict) -> list:
    out = []
    for key, p in res["points"].items():
        ms = p["bwd_ms"]
        if "SDPA CUDNN_ATTENTION" in ms:
            out.append(target(f"backward {key}: ours / SDPA CUDNN_ATTENTION (speed)",
                              ms["SDPA CUDNN_ATTENTION"] / ms[measure.OURS], BACKWARD_VS_CUDNN))
    return out


@register("flash08_backward", targets=backward_targets)
def backward_bench() -> dict:
    return backward_result()
