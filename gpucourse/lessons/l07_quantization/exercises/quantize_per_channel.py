"""Lesson 07's first exercise: symmetric per-channel quantization, one float32 scale per output row.

Judged (``JudgedExercise``): the answer is a pair ``(q, scale)``, and what makes it right is a set of properties
(dtypes, shapes, one scale per row equal to that row's max|w| / qmax, every integer in range, every weight rounded to
its nearest level), which the judge checks one by one and names the first rows that break them.
"""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

from .. import quant  # at module level: loaded before a graded submission is (see JudgedExercise)

STATEMENT = """\
Write `quantize_per_channel(w, bits)` that returns `(q, scale)`: symmetric quantization of the weight matrix `w`
(N, K) with one scale per output row. `bits` is 8 or 4 (qmax = 2**(bits-1) - 1: 127 or 7).
  scale[n] = max_k |w[n, k]| / qmax, float32, shape (N,); a row of zeros gets scale 1.0 (any finite scale > 0
            passes: the point is no division by zero, no NaN)
  q[n, k]  = round(w[n, k] / scale[n]) (round to nearest), clamped to [-qmax, qmax], int8 (int4 values too: one per
            byte; packing comes next), shape (N, K)
`w` is float32 or bfloat16, on any device; return q and scale on w's device and leave w unchanged. Use torch
operations (no kernel needed). Checked: dtypes and shapes, each row's scale, |q| <= qmax, and the round trip
|w - q * scale| <= scale / 2 for every weight, on random rows, rows of zeros, rows with one large outlier and
K that is not a power of two.
"""


def make_weight(params: dict, gen):
    import torch

    n, k = params["n"], params["k"]
    w = torch.randn(n, k, generator=gen) * (0.5 + torch.rand(n, 1, generator=gen))  # rows of different ranges
    kind = params.get("kind", "random")
    if kind == "zero rows":
        w[::3] = 0.0
    elif kind == "outlier":
        cols = torch.randint(k, (n,), generator=gen)
        w[torch.arange(n), cols] = 50.0 * torch.sign(torch.randn(n, generator=gen)) + 0.01
        w[0] = 0.0  # one row of zeros as well: the global max must not leak into it
    return w.to(getattr(torch, params.get("dtype", "float32")))


def reference(w, bits: int):
    """Per-channel symmetric quantization (what gpucourse.lessons.l07_quantization.quant.quantize computes)."""
    return quant.quantize(w, bits, "channel")


def check_answer(w, bits: int, got) -> list:
    """What is wrong with ``got`` as the per-channel quantization of ``w``; each problem names rows or values."""
    import torch

    qmax = 2 ** (bits - 1) - 1
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return [f"returned {type(got).__name__}, expected a pair (q, scale)"]
    q, scale = got
    for name, t in (("q", q), ("scale", scale)):
        if not isinstance(t, torch.Tensor):
            return [f"{name} is a {type(t).__name__}, expected a torch.Tensor"]
    n, k = w.shape
    problems = []
    if q.dtype != torch.int8:
        problems.append(f"q has dtype {str(q.dtype).replace('torch.', '')}, expected int8")
    if tuple(q.shape) != (n, k):
        problems.append(f"q has shape {tuple(q.shape)}, expected {(n, k)} (w's shape)")
    if scale.dtype != torch.float32:
        problems.append(f"scale has dtype {str(scale.dtype).replace('torch.', '')}, expected float32")
    if tuple(scale.shape) != (n,):
        hint = " (one scale for the whole tensor? this exercise wants one per row)" if scale.numel() == 1 else ""
        problems.append(f"scale has shape {tuple(scale.shape)}, expected ({n},): one per output row{hint}")
    if q.device != w.device or scale.device != w.device:
        problems.append(f"q is on {q.device} and scale on {scale.device}; expected w's device {w.device}")
    if problems:
        return problems
    wf = w.detach().cpu().to(torch.float64)
    qf = q.detach().cpu().to(torch.float64)
    s = scale.detach().cpu().to(torch.float64)
    amax = wf.abs().amax(dim=1)
    zero = amax == 0
    bad_nan = ~torch.isfinite(s) | (s <= 0)
    if bool(bad_nan.any()):
        rows = bad_nan.nonzero().flatten()[:5].tolist()
        return [f"scale is not a finite positive number in rows {rows} (e.g. {float(s[rows[0]]):.6g}); "
                f"{'those rows are all zeros: give them scale 1.0' if bool(zero[rows[0]]) else ''}".rstrip("; ")]
    want = amax / qmax
    wrong_scale = ~zero & ((s - want).abs() > 2e-6 * want)
    if bool(wrong_scale.any()):
        rows = wrong_scale.nonzero().flatten()
        r = int(rows[0])
        same = bool((s[~zero] == s[~zero][0]).all()) if bool((~zero).any()) else False
        hint = " (every row has the same scale: is it one scale for the whole tensor?)" if same and n > 1 else ""
        problems.append(f"scale wrong in {len(rows)} of {n} rows, first row {r}: got {float(s[r]):.6g}, expected "
                        f"max|w[{r}]| / {qmax} = {float(want[r]):.6g}{hint}")
    out_of_range = qf.abs() > qmax
    if bool(out_of_range.any()):
        i, j = out_of_range.nonzero()[0].tolist()
        problems.append(f"{int(out_of_range.sum())} values of q outside [-{qmax}, {qmax}], first q[{i}, {j}] = "
                        f"{int(qf[i, j])}")
    err = (wf - qf * s[:, None]).abs()
    bound = s[:, None] / 2 * (1 + 1e-5) + 1e-30
    bad = err > bound
    if bool(bad.any()):
        i, j = bad.nonzero()[0].tolist()
        problems.append(f"round trip too far off in {int(bad.sum())} of {n * k} weights, first w[{i}, {j}] = "
                        f"{float(wf[i, j]):.6g}: q * scale = {int(qf[i, j])} * {float(s[i]):.6g} = "
                        f"{float(qf[i, j] * s[i]):.6g}, off by {float(err[i, j]):.3g} > scale / 2 (round to the "
                        f"nearest level)")
    return problems


def judge(fn, params: dict, seed: int) -> list:
    """Make ``w`` from ``seed`` (secret, fresh per check), call ``fn`` on a copy and check its answer."""
    import torch

    w = make_weight(params, torch.Generator().manual_seed(seed)).to(device.torch_device())
    pristine = w.clone()
    with trapped(quant.quantize):  # the course's own answer is off limits
        got = fn(w, params["bits"])
    problems = check_answer(pristine, params["bits"], got)
    if not torch.equal(w.cpu(), pristine.cpu()):
        problems.append("modified its input w: compute q and scale without changing w")
    return problems


EXERCISE = JudgedExercise(
    id="quantize_per_channel",
    function="quantize_per_channel",
    signature="quantize_per_channel(w: Tensor, bits: int) -> tuple[Tensor, Tensor]",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("int8, 64x256", {"n": 64, "k": 256, "bits": 8}),
        Case("int4, 33x77 (K not a power of two)", {"n": 33, "k": 77, "bits": 4}),
        Case("int8, rows of zeros", {"n": 30, "k": 64, "bits": 8, "kind": "zero rows"}),
        Case("int8, one outlier per row", {"n": 24, "k": 128, "bits": 8, "kind": "outlier"}),
        Case("int4, one outlier per row", {"n": 24, "k": 96, "bits": 4, "kind": "outlier"}),
        Case("int8, bfloat16 weights 16x1000", {"n": 16, "k": 1000, "bits": 8, "dtype": "bfloat16"}),
    ),
    judge=judge,
)
