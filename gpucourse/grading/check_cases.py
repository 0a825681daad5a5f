"""A case's inputs, for the checker and the batch grader alike: the secret seed and each case's seed, the sizes a
case draws for this run, the arguments inside canary memory (guards.py) with the reference's answer computed on
private copies, and the copies of them a call gets on the device."""
from __future__ import annotations

import dataclasses
import os

import torch

from . import guards
from .exercise import drawn, has_draws, resolve


def new_seed() -> int:
    """A fresh secret seed per check: from the OS, never derived from anything the learner's code can set."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def case_seed(seed: int, index: int) -> int:
    """The seed of case number ``index`` of a check whose secret seed is ``seed``."""
    return (seed + 7919 * index) % (2**63 - 1)


def drawn_case(case, seed: int, index: int):
    """``case`` with the sizes its parameters draw (:class:`exercise.Draw`) drawn for this run: the same for the same
    secret seed, fresh for every run."""
    if not has_draws(case.params):
        return case
    gen = torch.Generator().manual_seed(case_seed(seed, index) ^ 0x5DEECE66D)
    return dataclasses.replace(case, params=resolve(case.params, gen))


def drawn_note(ex, case) -> str:
    """"sizes drawn for this run: n=1021" for a case that draws sizes (``case``: the drawn one), else ""."""
    try:
        spec = ex.case(case.name)
    except KeyError:
        return ""
    what = drawn(spec.params, case.params)
    return f"sizes drawn for this run: {what}" if what else ""


def make_case(ex, case, seed: int, index: int) -> tuple:
    """(arguments as guarded CPU buffers, expected output) for one case of a compared exercise. The reference runs
    on private copies."""
    case = drawn_case(case, seed, index)
    gen = torch.Generator().manual_seed(case_seed(seed, index))
    raw = ex.make_inputs(case.params, gen)
    keep = getattr(ex, "keep_alignment", False)
    args = [guards.guarded(a, keep_alignment=keep) if isinstance(a, torch.Tensor) else
            ({"value": a, "keep_alignment": True} if keep else {"value": a}) for a in raw]
    private = [guards.view_of(a).clone() if "buffer" in a else a["value"] for a in args]
    expected = ex.reference(*private)
    return args, expected


def _clone_value(value, keep_alignment: bool = False):
    """A list/tuple argument (e.g. sum_many's list of tensors) with each tensor in it cloned (``keep_alignment``: at
    the same offset from an aligned boundary, guards.placed_like)."""
    copy = guards.placed_like if keep_alignment else torch.Tensor.clone
    if isinstance(value, (list, tuple)):
        return type(value)(copy(v) if isinstance(v, torch.Tensor) else v for v in value)
    return value


def clone_args(args: list) -> list:
    """Independent copies of ``args`` (a call that modifies its inputs in place cannot reach the copies)."""
    return [dict(a, buffer=a["buffer"].clone()) if "buffer" in a else
            dict(a, value=_clone_value(a["value"], a.get("keep_alignment") is True)) for a in args]


def value_to(value, dev, keep_alignment: bool = False):
    """A list/tuple of tensors (e.g. sum_many's argument) is copied to ``dev`` element by element (``keep_alignment``:
    each at the same offset from an aligned boundary as it had, guards.placed_like)."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        if keep_alignment:
            return type(value)(guards.placed_like(v, dev) for v in value)
        return type(value)(v.to(dev, copy=True) for v in value)
    return value


def to_device(args: list, dev) -> list:
    """Copies on ``dev`` (always copies, so the pristine buffers stay untouched by the learner's call)."""
    return [dict(a, buffer=a["buffer"].to(dev, copy=True)) if "buffer" in a else
            dict(a, value=value_to(a["value"], dev, a.get("keep_alignment") is True)) for a in args]


def call_values(args: list) -> list:
    return [guards.view_of(a) if "buffer" in a else a["value"] for a in args]
