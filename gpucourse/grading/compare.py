"""Compare a learner's output with the reference and say *where* it is wrong.

Used by the in-notebook checker and by the batch grader's parent process alike. The tolerance is elementwise
``|got - expected| <= atol + rtol*|expected|`` with ``atol`` scaled by the largest reference magnitude (never a pure
absolute tolerance that lets zeros pass); a NaN or Inf in the output matches only a NaN or the same Inf in the
reference (NaN is never a wildcard); elements that still hold the poison pattern are reported as never written.
"""
from __future__ import annotations

import dataclasses

import torch

from .. import dtypes
from . import guards

MAX_SHOWN = 5

# What each element of a failed output is, in a where map (WhereMap.codes) and its drawing (drawing.py). A map cell
# that covers several elements takes the largest code among them: any wrong element in a block marks the block.
NONE, RIGHT, WRONG, NEVER, PAST = -1, 0, 1, 2, 3  # NONE: no element there (padding of a drawing)
MAX_SIDE = 1024  # a where map keeps at most MAX_SIDE**2 cells (1 MiB): larger outputs are pooled by blocks


@dataclasses.dataclass
class Mismatch:
    """Where and how much an output differs from the reference; ``ok`` when it matches within tolerance."""

    ok: bool
    problems: list  # one sentence each, most important first
    n_bad: int = 0
    numel: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    codes: torch.Tensor | None = None  # int8, the output's shape: RIGHT, WRONG or NEVER per element (see where_map)
    hints: list = dataclasses.field(default_factory=list)

    def text(self) -> str:
        return "\n".join(self.problems + [f"hint: {h}" for h in self.hints])


def _index(flat: int, shape) -> tuple:
    idx = []
    for s in reversed(shape):
        idx.append(flat % s)
        flat //= s
    return tuple(reversed(idx))


def _fmt_idx(i: tuple) -> str:
    return str(i[0]) if len(i) == 1 else "(" + ", ".join(map(str, i)) + ")"


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def dense_problem(t: torch.Tensor) -> str | None:
    """Why tensor ``t`` has no plain values to compare (sparse or another layout, nested, on the meta device), or
    None for an ordinary dense tensor."""
    if t.layout != torch.strided:
        return (f"returned a tensor with layout {str(t.layout).replace('torch.', '')}: return an ordinary dense "
                f"tensor (layout torch.strided; .to_dense() converts a sparse one)")
    if t.is_nested:
        return "returned a nested tensor: return an ordinary dense tensor"
    if t.is_meta:
        return "returned a tensor on the meta device, which holds no values: compute them on the inputs' device"
    return None


def check_meta(expected: torch.Tensor, got, device_type: str | None = None, got_device: str | None = None) -> list:
    """Problems with the type, layout, shape, dtype or device of ``got``; empty when they are right."""
    if got is None:
        return ["returned None: return the output tensor (did you forget `return out`?)"]
    if not isinstance(got, torch.Tensor):
        return [f"returned a {type(got).__name__}, expected a torch.Tensor of shape {tuple(expected.shape)} "
                f"and dtype {dtypes.torch_name(expected.dtype)}"]
    problem = dense_problem(got)
    if problem is not None:
        return [problem]
    problems = []
    if tuple(got.shape) != tuple(expected.shape):
        problems.append(f"wrong shape: expected {tuple(expected.shape)}, got {tuple(got.shape)}")
    if got.dtype != expected.dtype:
        problems.append(f"wrong dtype: expected {dtypes.torch_name(expected.dtype)}, "
                        f"got {dtypes.torch_name(got.dtype)}")
    dev = got_device or str(got.device)
    if device_type is not None and not dev.startswith(device_type):
        problems.append(f"wrong device: expected the inputs' device ({device_type}), got {dev}")
    return problems


def compare_values(expected: torch.Tensor, got: torch.Tensor, rtol: float, atol_scale: float,
                   hint_tf32: bool = False, zero_guess: bool = True, row_sum_cause: str | None = None) -> Mismatch:
    """Elementwise comparison of two tensors of the same shape (dtype may differ: compared in float64).
    ``zero_guess``: wrong elements that are all 0 may be said to be never written into a zero-initialised output
    (off where the call wrote out of bounds: that is the likelier cause, and leads the problems).
    ``row_sum_cause``: the likely cause named when the rows of a row-normalised output are each too small by one
    factor (their sums too large): by default :data:`ROW_SUM_PADDING` (a kernel's masked-off lanes loaded as 0); an
    exercise whose likelier mistake is another passes its own (online softmax: :data:`ROW_SUM_NOT_RESCALED`)."""
    numel = expected.numel()
    if numel == 0:
        return Mismatch(ok=True, problems=[], numel=0)
    exp_c = expected.detach().cpu()
    got_c = got.detach().cpu()
    never = guards.is_poison(got_c) if got_c.dtype == exp_c.dtype else torch.zeros(got_c.shape, dtype=torch.bool)
    e = exp_c.to(torch.float64)
    g = got_c.to(torch.float64)
    finite_e = torch.isfinite(e)
    scale = float(e[finite_e].abs().max()) if bool(finite_e.any()) else 0.0
    atol = atol_scale * scale
    diff = (g - e).abs()
    close = diff <= atol + rtol * e.abs()
    # Non-finite values match only the same non-finite value in the reference.
    both_nan = torch.isnan(e) & torch.isnan(g)
    same_inf = torch.isinf(e) & (g == e)
    close = (close & torch.isfinite(g) & finite_e) | both_nan | same_inf
    bad = ~close
    n_bad = int(bad.sum())
    fin = finite_e & torch.isfinite(g)
    max_abs = float(diff[fin].max()) if bool(fin.any()) else 0.0
    rel = diff / e.abs().clamp_min(max(atol, 1e-30))
    max_rel = float(rel[fin].max()) if bool(fin.any()) else 0.0
    if n_bad == 0:
        return Mismatch(ok=True, problems=[], numel=numel, max_abs=max_abs, max_rel=max_rel)

    problems = []
    flat_bad = bad.reshape(-1)
    flat_never = never.reshape(-1) & flat_bad
    n_never = int(flat_never.sum())
    if n_never:
        first = int(flat_never.nonzero()[0])
        last_bad = int(flat_bad.nonzero()[-1])
        tail = n_never == numel - first and last_bad == numel - 1 and got.dim() <= 1
        where = (f"the tail from index {first} on" if tail
                 else f"first at index {_fmt_idx(_index(first, got.shape))}")
        problems.append(f"elements never written: {n_never} of {numel} still hold the poison the output was "
                        f"filled with before your call ({where}); check the mask and the grid size")
    else:
        zeros = (g.reshape(-1) == 0) & flat_bad
        if zero_guess and int(zeros.sum()) == n_bad and n_bad > 1:
            first = int(flat_bad.nonzero()[0])
            problems.append(f"{n_bad} wrong elements are all 0 (first at index {_fmt_idx(_index(first, got.shape))})"
                            f": elements never written into a zero-initialised output?")
    scaled_rows = None if n_never else _scaled_rows_problem(e, g, bad, exp_c.dtype, row_sum_cause)
    if scaled_rows:
        problems.append(scaled_rows)
    nan_bad = int((torch.isnan(g) & ~torch.isnan(e) & ~never).sum())
    inf_bad = int((torch.isinf(g) & ~torch.isinf(e)).sum())
    if nan_bad or inf_bad:
        problems.append(f"non-finite output where the reference is finite: {nan_bad} NaN, {inf_bad} Inf")
    idx = flat_bad.nonzero().reshape(-1)[:MAX_SHOWN].tolist()
    shown = ", ".join(f"[{_fmt_idx(_index(i, got.shape))}] expected {_fmt(float(e.reshape(-1)[i]))} "
                      f"got {_fmt(float(g.reshape(-1)[i]))}" for i in idx)
    if _is_integer(exp_c.dtype):
        problems.append(_integer_mismatch(n_bad, numel, shown, g - e, bad, rtol, atol))
    else:
        errors = (f"max abs error {_fmt(max_abs)}, max rel error {_fmt(max_rel)} over finite elements"
                  if bool((bad & fin).any()) else "no finite element is wrong")
        problems.append(f"{n_bad} of {numel} elements differ (first mismatches: {shown}); {errors} "
                        f"(tolerance: rtol {rtol:g}, atol {atol:.3g} = {atol_scale:g} x max|expected|)")
    hints = [] if scaled_rows else _precision_hints(e, g, bad & fin, exp_c.dtype, hint_tf32)
    codes = bad.to(torch.int8)
    codes[never & bad] = NEVER
    return Mismatch(ok=False, problems=problems, n_bad=n_bad, numel=numel, max_abs=max_abs, max_rel=max_rel,
                    codes=codes, hints=hints)


def _is_integer(dtype) -> bool:
    """Integer and bool outputs: compared as counts of wrong elements and integer differences, never as a relative
    error (against an expected 0 that is a division by the tolerance's floor: "max rel error 8e+30")."""
    return not dtype.is_floating_point and not dtype.is_complex


def _integer_mismatch(n_bad: int, numel: int, shown: str, diff: torch.Tensor, bad: torch.Tensor, rtol: float,
                      atol: float) -> str:
    """The problem line of a wrong integer output: how many elements differ, by how much (off by one, more)."""
    off = diff[bad].abs()
    by_one = int((off == 1).sum())
    spread = (f"{by_one} off by 1, {n_bad - by_one} by more; max difference {int(off.max())}" if n_bad else "")
    rule = "must match exactly" if rtol == 0 and atol == 0 else f"tolerance: rtol {rtol:g}, atol {atol:.3g}"
    return (f"{n_bad} of {numel} integer elements differ (first mismatches: {shown}); {spread} (integer output: "
            f"{rule})")


# Relative rounding noise of an output dtype (a few ulps), below which a row's scale factor is not told apart from 1.
_ROW_NOISE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


# Why each row of a softmax may come out too small by one factor (its sum, the normaliser, too large): the likely
# cause named after the finding, chosen by the exercise (compare_values' ``row_sum_cause``).
ROW_SUM_PADDING = ("Loading a block wider than the row? Its masked-off lanes must load -inf (exp(-inf) = 0), not 0: "
                   "each such lane adds exp(0 - max) to the sum (tl.load(..., mask=..., other=-float('inf')))")
ROW_SUM_NOT_RESCALED = ("A running maximum that changes must rescale what was summed so far: when a block raises a "
                        "row's maximum from m_old to m_new, multiply the running sum l (and anything else computed "
                        "against m_old) by exp(m_old - m_new) before adding the block's exp(x - m_new); terms left "
                        "as exp(x - m_old) count too much")


def _scaled_rows_problem(e, g, bad, dtype, cause: str | None = None) -> str | None:
    """For a row-normalised output (2-D, every reference row >= 0 and summing to 1, as a softmax's): when each wrong
    row is the right row times one factor below 1, the row's sum (the normaliser) is too large, for the likely
    ``cause`` (default :data:`ROW_SUM_PADDING`: in a kernel that loads a block wider than the row, the masked-off
    lanes were loaded as 0 instead of -inf). None otherwise."""
    noise = _ROW_NOISE.get(dtype)
    if noise is None or e.dim() != 2 or e.shape[1] < 2 or not bool(torch.isfinite(e).all() & torch.isfinite(g).all()):
        return None
    if bool((e < 0).any()) or float((e.sum(dim=1) - 1).abs().max()) > 1e-2:
        return None
    rows = bad.any(dim=1).nonzero().reshape(-1)
    if rows.numel() == 0:
        return None
    e_r, g_r = e[rows], g[rows]
    significant = e_r >= 1e-2 * e_r.amax(dim=1, keepdim=True)  # tiny elements carry rounding, not the factor
    ratio = torch.where(significant, g_r / e_r.clamp_min(1e-300), torch.full_like(e_r, float("nan")))
    factor = ratio.nanmedian(dim=1).values
    spread = torch.where(significant, (ratio - factor[:, None]).abs(), torch.zeros_like(e_r)).amax(dim=1)
    short = 1 - factor
    if not bool(((short > 4 * noise) & (spread <= 0.2 * short + 2 * noise)).all()):
        return None
    shown = ", ".join(f"row {int(r)}: x{float(f):.6g}" for r, f in zip(rows[:3], factor[:3]))
    return (f"every element of each wrong row is too small by the same factor ({rows.numel()} rows; {shown}): "
            f"each row's sum is too large. {cause or ROW_SUM_PADDING}")


def _precision_hints(e, g, bad_finite, dtype, hint_tf32: bool) -> list:
    """Name the likely cause when the errors are small and spread out, like rounding to fewer mantissa bits."""
    if dtype != torch.float32 or int(bad_finite.sum()) == 0:
        return []
    rel = ((g - e).abs() / e.abs().clamp_min(1e-30))[bad_finite]
    typical = float(rel.median())
    if 1e-4 < typical < 3e-3:
        if hint_tf32:
            return ["relative errors near 1e-3 look like TF32 (fp32 inputs rounded to 10 mantissa bits in "
                    "tl.dot or torch matmul): use input_precision='ieee' in tl.dot / "
                    "torch.backends.cuda.matmul.allow_tf32 = False, or fp16 accumulation"]
        return ["relative errors near 1e-3 look like fp16 arithmetic or accumulation: compute in float32"]
    if 3e-3 <= typical < 3e-2:
        return ["relative errors near 4e-3 look like bf16 arithmetic or accumulation: compute in float32"]
    return []


def compare_scalar(expected, got, rtol: float, atol_scale: float) -> Mismatch:
    """For exercises whose answer is a number (kind "none"): same rule as tensors, NaN never matches."""
    try:
        g = float(got.item() if isinstance(got, torch.Tensor) else got)
    except (TypeError, ValueError, RuntimeError):
        return Mismatch(ok=False, problems=[f"returned {type(got).__name__}, expected a number"])
    e = float(expected.item() if isinstance(expected, torch.Tensor) else expected)
    ok = g == g and abs(g - e) <= atol_scale * abs(e) + rtol * abs(e)
    return Mismatch(ok=ok, problems=[] if ok else [f"expected {_fmt(e)}, got {_fmt(g)}"], n_bad=0 if ok else 1,
                    numel=1, max_abs=abs(g - e) if g == g else float("nan"))


# ---------------------------------------------------------------------------------------------------------------------
# Where maps: a small per-element picture of a failed output, carried on the case result and drawn by drawing.py.


@dataclasses.dataclass
class WhereMap:
    """Where a failed output is wrong: a category per element (RIGHT, WRONG value, NEVER written), and the elements
    written past the output's end. Counts are exact over the whole output; ``codes`` may be pooled by ``block``.

    ``codes``: int8, 1-D for a 1-D output, else 2-D: the last two dimensions of the output, of the slice ``slice``
    (the leading indices) for a 3-D or larger output. ``block``: elements per cell along each dimension of ``codes``
    (all 1 unless a 1-D output has more than MAX_SIDE**2 elements or a drawn dimension more than MAX_SIDE; a cell
    shows its largest code). ``past_end``: offsets after the last element (0 is the first element past the end) that
    the code wrote into the output's guard band, or None when there were none or the memory after the output is not
    a guard band the checker put there (an output allocated with torch.zeros, say: see guards.py).
    """

    codes: torch.Tensor
    shape: tuple
    block: tuple
    n_right: int
    n_wrong: int
    n_never: int
    slice: tuple = ()
    past_end: torch.Tensor | None = None

    @property
    def n_past(self) -> int:
        return 0 if self.past_end is None else int(self.past_end.numel())


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def block_for(n: int, max_cells: int) -> int:
    """The smallest power of two ``b`` that pools ``n`` elements into at most ``max_cells`` cells of ``b``."""
    return _pow2_at_least(-(-n // max(1, max_cells)))


def pool(codes: torch.Tensor, block: tuple) -> torch.Tensor:
    """``codes`` (1-D or 2-D, int8) pooled by ``block`` elements per cell along each dimension: a cell gets the
    largest code among its elements (any wrong element marks its block); a partial block at the end is padded with
    NONE, which loses to every real element."""
    if all(b == 1 for b in block):
        return codes
    pads = [(-s) % b for s, b in zip(codes.shape, block)]
    padded = torch.full([s + p for s, p in zip(codes.shape, pads)], NONE, dtype=codes.dtype)
    padded[tuple(slice(0, s) for s in codes.shape)] = codes
    if codes.dim() == 1:
        return padded.view(-1, block[0]).amax(dim=1)
    rows, cols = padded.shape
    return padded.view(rows // block[0], block[0], cols // block[1], block[1]).amax(dim=(1, 3))


def past_end_writes(out) -> torch.Tensor | None:
    """Offsets after the last element of ``out`` that were written, read from the guard band that
    :func:`guards.poisoned_allocations` puts after an output the learner's code allocated; None when ``out`` is not
    such an output (allocated another way, a view, not contiguous: its memory after the end is not a guard band)."""
    if not isinstance(out, torch.Tensor) or dense_problem(out) is not None or not guards.supported(out.dtype) or \
            out.numel() == 0 or out.storage_offset() != 0 or not out.is_contiguous():
        return None
    n = out.numel()
    if out.untyped_storage().nbytes() != (n + guards.GUARD) * out.element_size():
        return None
    band = torch.as_strided(out.detach(), (guards.GUARD,), (1,), n).cpu()
    return (~guards.is_band(band)).nonzero().reshape(-1)


def where_map(shape, codes: torch.Tensor | None, past_end: torch.Tensor | None = None) -> WhereMap | None:
    """The :class:`WhereMap` of an output of ``shape`` whose elements' categories are ``codes`` (Mismatch.codes;
    None: every element right) and whose writes past the end are ``past_end`` (:func:`past_end_writes`). None when
    there is nothing to show (every element right and nothing written past the end) or the output is empty."""
    shape = tuple(shape)
    numel = 1
    for s in shape:
        numel *= int(s)
    has_past = past_end is not None and past_end.numel() > 0
    if numel == 0 or (codes is None and not has_past):
        return None
    if codes is None:
        codes = torch.zeros(shape, dtype=torch.int8)
    if tuple(codes.shape) != shape:
        raise ValueError(f"where_map: codes of shape {tuple(codes.shape)} for an output of shape {shape}")
    codes = codes.detach().cpu().to(torch.int8)
    n_wrong, n_never = int((codes == WRONG).sum()), int((codes == NEVER).sum())
    index = ()
    if len(shape) <= 1:
        grid = codes.reshape(-1)
        block = (block_for(numel, MAX_SIDE * MAX_SIDE),)
    else:
        if len(shape) > 2:  # the first slice with a wrong element; the last one when only the past end is wrong
            lead = shape[:-2]
            per_slice = codes.reshape(-1, shape[-2] * shape[-1])
            bad = (per_slice != RIGHT).any(dim=1).nonzero().reshape(-1)
            first = int(bad[0]) if bad.numel() else per_slice.shape[0] - 1
            index = _index(first, lead)
            grid = codes[index]
        else:
            grid = codes
        block = (block_for(shape[-2], MAX_SIDE), block_for(shape[-1], MAX_SIDE))
    return WhereMap(codes=pool(grid, block).clone(), shape=shape, block=block, n_right=numel - n_wrong - n_never,
                    n_wrong=n_wrong, n_never=n_never, slice=tuple(int(i) for i in index),
                    past_end=past_end.detach().cpu().to(torch.int64) if has_past else None)
