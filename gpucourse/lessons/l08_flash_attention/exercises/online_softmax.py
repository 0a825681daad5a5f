"""Lesson 08's first exercise: softmax over the rows of a 2-D tensor in one pass over its column blocks.

Judged (``JudgedExercise``): the judge hands the learner's function a read-counting tensor (``readcount.Reader``), so
the check proves what the exercise is about: every element of ``x`` read exactly once, by operations that each see
at most ``block`` columns, and the answer equal to softmax. Reading a block once and keeping it is allowed (that is
what a kernel does with a tile); a second pass over ``x`` (the max first, then the exponentials) is not, nor one
operation over whole rows (``torch.softmax(x)``). The same holds for what the function computes from x
(``_Derived``): a max, sum or softmax over more than ``block`` columns of kept copies is a second pass, or a
whole-row softmax, done on copies; combining per-block statistics is free.
"""
from __future__ import annotations

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from gpucourse import device
from gpucourse.grading import compare
from gpucourse.grading.exercise import Case, JudgedExercise, Tolerance

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
correction that reads only what you kept, never `x`.
A max, a sum or a softmax over more than `block` columns of what you kept fails too: that is a second pass
(or a whole-row softmax) done on copies. Values can be large (|x| up to ~6e4): never `exp` an
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


# Operations that combine elements along a dimension: (dimension argument's position, default). A matrix product
# combines along its inner dimension (handled apart).
_ALONG = {"aten.amax": (1, None), "aten.amin": (1, None), "aten.max": (1, None), "aten.min": (1, None),
          "aten.sum": (1, None), "aten.mean": (1, None), "aten.prod": (1, None), "aten.logsumexp": (1, None),
          "aten._softmax": (1, None), "aten._log_softmax": (1, None), "aten.softmax": (1, None),
          "aten.log_softmax": (1, None), "aten.cumsum": (1, None), "aten.cumprod": (1, None),
          "aten.cummax": (1, None), "aten.logcumsumexp": (1, None), "aten.sort": (1, -1), "aten.topk": (2, -1),
          "aten.argmax": (1, None), "aten.argmin": (1, None), "aten.var": (1, None), "aten.std": (1, None),
          "aten.norm": (2, None), "aten.linalg_vector_norm": (2, None), "aten.kthvalue": (2, -1),
          "aten.median": (1, None), "aten.nansum": (1, None), "aten.all": (1, None), "aten.any": (1, None)}
_MATMUL = {"aten.mm", "aten.bmm", "aten.addmm", "aten.matmul", "aten.mv", "aten.dot", "aten.baddbmm",
           "aten.addmv", "aten.linear", "aten.einsum", "aten.tensordot"}


class _Derived(TorchDispatchMode):
    """Follows what the function computes from ``x``: a tensor made by an element-wise operation (or a copy, a
    concatenation) from x's elements holds element data; a reduction's result holds statistics. An operation that
    combines more than ``block`` elements of element data along one dimension (a max, a sum, a softmax, a matrix
    product) is what the exercise forbids, whether it reads x or copies of x kept from earlier blocks: that is a
    softmax over whole rows, or a second pass, done on copies. Statistics (the per-block maxima and sums) may be
    combined freely. NumPy or Python numbers escape this watch."""

    def __init__(self, block: int):
        super().__init__()
        self.block, self.elem, self.wide = block, WeakIdKeyDictionary(), []

    def _is_elem(self, t) -> bool:
        return isinstance(t, Counted) or (isinstance(t, torch.Tensor) and t in self.elem)

    def _along(self, name: str, args, kwargs) -> int:
        """How many elements of element data the operation combines along one dimension (0: none)."""
        base = name.split(".")[0] if name.count(".") > 1 else name
        if base in _MATMUL:
            mats = [a for a in args if isinstance(a, torch.Tensor) and a.dim() >= 1]
            if any(self._is_elem(a) for a in mats):
                return max(int(a.shape[-1]) for a in mats)
            return 0
        if base not in _ALONG or not args or not self._is_elem(args[0]):
            return 0
        t = args[0]
        pos, default = _ALONG[base]
        dim = kwargs.get("dim", args[pos] if len(args) > pos else default)
        if isinstance(dim, (list, tuple)):
            dims = list(dim)
        elif dim is None:
            return int(t.numel())  # over everything
        else:
            dims = [dim]
        if not dims:
            return int(t.numel())
        n = 1
        for d in dims:
            if isinstance(d, int) and t.dim():
                n *= int(t.shape[d])
        return n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
        name = name if name.startswith("aten.") else "aten." + name.split("::")[-1]
        out = func(*args, **kwargs)
        flat = pytree.tree_leaves((args, kwargs))
        if not any(self._is_elem(a) for a in flat):
            return out
        along = self._along(name, args, kwargs)
        if along > self.block:
            self.wide.append((name, along))
        elem_out = along == 0 and name.split(".")[0] not in _ALONG and name not in _ALONG
        for o in pytree.tree_leaves(out):
            if isinstance(o, torch.Tensor) and not isinstance(o, Counted) and elem_out:
                self.elem[o] = True
        return out


def judge(fn, params: dict, seed: int) -> list:
    """Make ``x`` from ``seed``, call ``fn`` on a read-counting copy, then check the reads and the answer."""
    x = make_x(params, torch.Generator().manual_seed(seed))
    expected = reference(x)
    reader = Reader(x.to(device.torch_device()), params["block"])
    try:
        derived = _Derived(params["block"])
        with derived:
            got = fn(reader.tensor, params["block"])
        if isinstance(got, Counted):
            return ["returned x itself (or a view of it): compute the softmax into a new tensor"]
        problems = reader.problems()
        if derived.wide and not problems:
            op, n = derived.wide[0]
            problems.append(f"{op} combined {n} elements computed from x along one dimension; block={params['block']}: "
                            f"a max, a sum or a softmax over more than one block of kept copies is a second pass "
                            f"(or a whole-row softmax) done on copies. Combine each block as it arrives, keeping per "
                            f"row only a running maximum and sum, and finish with a correction")
    finally:
        reader.close()
    meta = compare.check_meta(expected, got, device.torch_device().type)
    if meta:
        return problems + meta
    tol = EXERCISE.tolerance_for(expected.dtype)
    # Rows each too small by one factor: here the running sum was not rescaled (there is no padding to load).
    m = compare.compare_values(expected, got.detach().cpu(), tol.rtol, tol.atol_scale,
                               row_sum_cause=compare.ROW_SUM_NOT_RESCALED)
    return problems + m.problems + [f"hint: {h}" for h in m.hints]


EXERCISE = JudgedExercise(
    id="online_softmax",
    function="online_softmax",
    signature="online_softmax(x: Tensor, block: int) -> Tensor",
    statement=STATEMENT,
    kind="none",
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
    judge=judge,
)
