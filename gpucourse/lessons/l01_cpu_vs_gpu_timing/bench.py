"""Lesson 01's benchmarks: where the GPU beats the CPU, and what naive timing gets wrong.

Each benchmark calls the same function of ``measure`` that the notebook calls, and the notebook hands its results to
``gpucourse.benchmarks.record`` (the targets are registered apart for that).
"""
from __future__ import annotations

from gpucourse.benchmarks import register, target

from . import measure


@register("pipeline01_crossover")
def crossover() -> dict:
    return {"matmul": measure.crossover("matmul"), "add": measure.crossover("add")}


def _pair_target(p):
    """The wrong number must be off by at least 10% the way the mistake pushes it (a pair pointing the other way
    would teach the opposite of the lesson), or either way where that depends on the GPU."""
    try:
        way = measure.MISTAKE_DIRECTION[p["mistake"]]
    except KeyError:
        raise ValueError(f"unknown timing mistake {p['mistake']!r}: measure.MISTAKE_DIRECTION says which way each "
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


@register("pipeline01_timing_pairs", targets=_pairs_targets)
def timing_pairs() -> dict:
    return {"pairs": measure.timing_pairs()}
