"""Lesson 08's registered benchmarks. The notebook measures them in its own cells and hands each result to
``gpucourse.benchmarks.record``; ``gpucourse bench`` runs the same functions on its own. Every ratio is measured
within one run: the kernel and its peers timed the same way, in interleaved rounds.
"""
from __future__ import annotations

from gpucourse.benchmarks import register, target

from . import measure

SHAPES = [(d, causal) for d in (64, 128) for causal in (False, True)]  # at fp16, B 4, H 16, S 4096


def _key(d: int, causal: bool) -> str:
    return f"D{d}{' causal' if causal else ''}"


def forward_result(rounds: int = 3) -> dict:
    return {"points": {_key(d, c): measure.forward_point(d=d, causal=c, rounds=rounds) for d, c in SHAPES}}


def forward_targets(res: dict) -> list:
    out = []
    for key, p in res["points"].items():
        ms = p["ms"]
        ours = ms["ours (Triton)"]
        if "SDPA FLASH_ATTENTION" in ms:
            out.append(target(f"forward {key}: ours / SDPA FLASH_ATTENTION (speed)", ms["SDPA FLASH_ATTENTION"] / ours,
                              1.15))
        if key == "D128" and "SDPA CUDNN_ATTENTION" in ms:
            out.append(target(f"forward {key}: ours / SDPA CUDNN_ATTENTION (speed)", ms["SDPA CUDNN_ATTENTION"] / ours,
                              0.80))
        out.append(target(f"forward {key}: ours / naive attention (speed)", ms["naive"] / ours, 5.0))
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
    return {"points": {_key(d, c): measure.backward_point(d=d, causal=c, rounds=rounds) for d, c in SHAPES}}


def backward_targets(res: dict) -> list:
    return [target(f"backward {key}: ours / SDPA FLASH_ATTENTION (speed)",
                   p["bwd_ms"]["SDPA FLASH_ATTENTION"] / p["bwd_ms"]["ours (Triton)"], 0.8)
            for key, p in res["points"].items()]


@register("flash08_backward", targets=backward_targets)
def backward_bench() -> dict:
    return backward_result()
