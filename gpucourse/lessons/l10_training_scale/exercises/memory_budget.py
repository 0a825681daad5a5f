"""Lesson 10's first exercise: the memory budget of a training step of the lesson's transformer, on paper.

Judged (``JudgedExercise``): for each case the judge draws the sizes from the case's secret seed (the case names
the mode: precision and checkpointing), builds the model at that config and measures one training
step (model.measure_budget) before it calls the learner's function: the bytes of the parameters, of the gradients
after backward, of AdamW's state after the step, and of the activations alive when the forward pass ends (on a GPU
the allocator's ``memory_allocated`` after the forward minus before it; on the CPU the storages created by the
forward and still alive, tracked op by op). Each figure must be within 10% of the measurement.
"""
from __future__ import annotations

import numbers
import random

from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

from .. import budget, model

KEYS = ("parameters", "gradients", "optimizer", "activations")
TOLERANCE = 0.10

STATEMENT = """\
Write `memory_budget(config) -> dict` for the lesson's transformer (`gpucourse.lessons.l10_training_scale.model`):
`config` has `d`, `layers`, `heads`, `batch`, `seq`, `precision` ("fp32", or "bf16": bf16 autocast over float32
weights) and `checkpoint` ("none", "block": every block checkpointed, "mlp": only each block's MLP half). Return the
bytes of one training step's `"parameters"`, `"gradients"`, `"optimizer"` (fused AdamW's state) and
`"activations"` (what autograd keeps: the tensors made by the forward pass and still alive when it ends; the batch
itself existed before and does not count). Write it from the model's code, on paper: per block, which tensors does
each layer keep for its backward, in which dtype? (Layer norm keeps its input and two float32 numbers per token; a
linear layer keeps its input, and under autocast the bf16 copy of its weight; attention keeps q, k, v, its output
and one float32 log-sum-exp per query and head; GELU keeps its input.)
The check builds the model at each case's mode, with sizes it draws afresh each run, and measures a training step
(GPU: `torch.cuda.memory_allocated`; CPU: every tensor the forward pass creates, tracked until it is freed); each of
your four figures must be within 10% of the measurement. Do not call the lesson's own `budget` functions.
"""


def _warm_up() -> None:
    """One tiny step in each mode at import: torch patches the optimizer class's ``step`` and loads what autocast and
    checkpointing use on first use, and the grader's worker takes its snapshot of what the judge relies on after
    this module is imported (a change later would look like the submission's)."""
    for precision, ckpt in (("fp32", "none"), ("bf16", "block"), ("bf16", "mlp")):
        model.measure_budget(dict(d=8, layers=1, heads=2, batch=1, seq=4, precision=precision, checkpoint=ckpt),
                             "cpu", peak=True)


_warm_up()


def drawn(params: dict, seed: int) -> dict:
    """The case's mode (precision, checkpointing) at sizes drawn from the case's secret seed: a fresh configuration
    every run, so that no table of answers for the listed cases can pass. Tokens (batch x seq) stay between half and
    twice the width, where every term of the budget (the bf16 weight copies too) is more than 10% of its total, and
    batch >= 2 (per sequence and per batch differ). Small enough to measure on a CPU."""
    rng = random.Random(seed)
    heads = rng.choice((2, 4, 8))
    d = heads * rng.choice((16, 24, 32))
    batch = rng.randint(2, 4)
    lo, hi = max(8, d // (2 * batch)), max(8, 2 * d // batch)
    seq = rng.randint(lo // 8, hi // 8) * 8 or 8
    return dict(params, heads=heads, d=d, layers=rng.randint(1, 4), batch=batch, seq=seq)


def judge(fn, params: dict, seed: int) -> list:
    cfg = model.config(model.CPU_CONFIG, **drawn(params, seed))
    measured = model.measure_budget(cfg, seed=seed % 1000, peak=False)
    with trapped(budget.predict, budget.activations, budget.activations_per_block, budget.predict_peak):
        got = fn(dict(cfg))
    if not isinstance(got, dict):
        return [f"memory_budget returned {type(got).__name__}; return a dict with keys {list(KEYS)}"]
    missing = [k for k in KEYS if k not in got]
    if missing:
        return [f"the returned dict has no {missing} (keys: {list(KEYS)})"]
    problems = []
    for key in KEYS:
        have, want = got[key], measured[key]
        if not isinstance(have, numbers.Real) or isinstance(have, bool) or have != have:
            problems.append(f"{key!r} is {have!r}: return a number of bytes")
            continue
        ratio = have / want
        if abs(ratio - 1) > TOLERANCE:
            problems.append(f"{key}: you said {have:,.0f} bytes, measured {want:,.0f} ({ratio:.2f}x the "
                            f"measurement; within {TOLERANCE:.0%} passes)")
    if problems:
        sizes = ", ".join(f"{k}={cfg[k]}" for k in ("d", "layers", "heads", "batch", "seq"))
        problems[0] += f" (at {sizes}: each run draws the sizes afresh, keeping the case's mode)"
    return problems


def _case(name: str, **cfg) -> Case:
    return Case(name, cfg)


EXERCISE = JudgedExercise(
    id="memory_budget",
    function="memory_budget",
    signature="memory_budget(config: dict) -> dict",
    statement=STATEMENT,
    kind="none",
    cases=(  # modes; the sizes are drawn from each case's seed (``drawn``)
        _case("fp32", precision="fp32", checkpoint="none"),
        _case("bf16 autocast", precision="bf16", checkpoint="none"),
        _case("fp32, every block checkpointed", precision="fp32", checkpoint="block"),
        _case("bf16 autocast, MLPs checkpointed", precision="bf16", checkpoint="mlp"),
        _case("bf16 autocast, every block checkpointed", precision="bf16", checkpoint="block"),
    ),
    judge=judge,
)
