"""Lesson 08's first exercise: softmax over the rows of a 2-D tensor in one pass over its column blocks.

Judged (``Exercise.judge``): the judge hands the learner's function a read-counting tensor (``readcount.Reader``), so
the check proves what the exercise is about: every element of ``x`` read exactly once, by operations that each see
at most ``block`` columns, and the answer equal to softmax. Reading a block once and keeping it is allowed (that is
what a kernel does with a tile); a second pass over ``x`` (the max first, then the exponentials) is not, nor one
operation over whole rows (``torch.softmax(x)``).
"""
from __future__ import annotations

import torch

from gpucourse import device
from gpucourse.grading import compare
from gpucourse.grading.exercise import Case, Exercise, Tolerance

from ..readcount import Counted, Reader

STATEMENT = """\
Write `online_softmax(x, block)` that returns `softmax(x, dim=-1)` (a new tensor, x's shape and dtype) for a 2-D
tensor `x`, reading `x` once, from left to right, in column blocks of width `block` (the last block may be
narrower), as FlashAttention does with the key blocks. Use plain torch operations; compute in float32 and return
`x`'s dtype.
The check gives you a tensor that counts reads: each element of `x` must be read by exactly one torch operation,
and no operation may see more than `block` columns of `x`. So load each block once,
`blk = x[:, j:j + block].float().clone()` (or `.to(torch.float32, copy=True)`), and compute on `blk`; slicing,
`split` and other views read nothing. Keep a running maximum `m` and a running sum `l` per row; when a block
raises `m`, rescale `l` (and anything else computed against the old `m`) by `exp(m_old - m_new)`. Keep what
each block needs for the output (its exponentials, and the `m` they were computed against), and finish with a
correction that reads only what you kept, never `x`. Values can be large (|x| up to ~6e4): never `exp` an
unshifted value. Do not modify `x`.
"""

MAX_ABS = 6.0


def make_x(params: dict, gen) -> torch.Tensor:
    rows, cols = params["rows"], params["cols"]
    x = torch.randn(rows, cols, generator=gen).clamp_(-MAX_ABS, MAX_ABS) * params.get("scale", 1.0)
    if params.get("rising"):  # the row maximum moves right block after block: every block rescales
        x = x + torch.linspace(0, 8, cols)
    return x.to(getattr(torch, params.get("dtype", "float32")))


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.to(torch.float64), dim=-1).to(x.dtype)


def judge(fn, params: dict, seed: int) -> list:
    """Make ``x`` from ``seed``, call ``fn`` on a read-counting copy, then check the reads and the answer."""
    x = make_x(params, torch.Generator().manual_seed(seed))
    expected = reference(x)
    reader = Reader(x.to(device.torch_device()), params["block"])
    try:
        got = fn(reader.tensor, params["block"])
        if isinstance(got, Counted):
            return ["returned x itself (or a view of it): compute the softmax into a new tensor"]
        problems = reader.problems()
    finally:
        reader.close()
    meta = compare.check_meta(expected, got, device.torch_device().type)
    if meta:
        return problems + meta
    tol = EXERCISE.tolerance_for(expected.dtype)
    m = compare.compare_values(expected, got.detach().cpu(), tol.rtol, tol.atol_scale)
    return problems + m.problems + [f"hint: {h}" for h in m.hints]


EXERCISE = Exercise(
    id="online_softmax",
    function="online_softmax",
    signature="online_softmax(x: Tensor, block: int) -> Tensor",
    statement=STATEMENT,
    kind="none",
    make_inputs=None,  # judged: ``judge`` makes the inputs and checks reads and answer itself
    reference=None,
    cases=(
        Case("4x64, block 16 (whole blocks)", {"rows": 4, "cols": 64, "block": 16}),
        Case("3x100, block 32 (ragged last block)", {"rows": 3, "cols": 100, "block": 32}),
        Case("5x37, block 1", {"rows": 5, "cols": 37, "block": 1}),
        Case("2x20, block 64 (one block wider than the row)", {"rows": 2, "cols": 20, "block": 64}),
        Case("6x1, block 8 (width 1)", {"rows": 6, "cols": 1, "block": 8}),
        Case("4x96, block 16, maximum rising to the right", {"rows": 4, "cols": 96, "block": 16, "rising": True}),
        Case("large magnitudes (x1e4), 4x50, block 16", {"rows": 4, "cols": 50, "block": 16, "scale": 1e4}),
        Case("float16, 3x300, block 64", {"rows": 3, "cols": 300, "block": 64, "dtype": "float16"}),
        Case("bfloat16, 3x130, block 32", {"rows": 3, "cols": 130, "block": 32, "dtype": "bfloat16"}),
    ),
    tolerance={"float32": Tolerance(1e-5, 1e-6)},
    determinism=None,
    judge=judge,
)
