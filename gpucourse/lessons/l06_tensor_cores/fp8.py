"""FP8 against ``torch._scaled_mm`` (lesson 06): speed over sizes, like for like in each accumulation mode
from interleaved rounds, and accuracy against a float64 product. The readers (``format_like_for_like``,
``round_ratios``, ``accuracy_rows``) are pure Python and also run on recorded results."""
from __future__ import annotations

import torch

from gpucourse import device
from gpucourse.progress import progress
from gpucourse.timing import interleaved, settle

from . import precision


# The four FP8 variants of the like-for-like comparison: each kernel in each accumulation mode.
FP8_PRECISE = ("fp8_matmul precise", "_scaled_mm precise")
FP8_FAST = ("fp8_matmul fast", "_scaled_mm fast")
FP8_ROW_MAJOR = "fp8_matmul fast, b row-major"


def _spread(values: list) -> list:
    return [min(values), max(values)]


def round_ratios(theirs_ms: list, mine_ms: list) -> tuple:
    """Speed of "mine" relative to "theirs" from interleaved rounds: each round's ratio of median times
    (theirs / mine, above 1 = mine faster), then (median of the rounds' ratios, [lowest, highest]). Pairing within a
    round keeps the two under the same clock; the range says how much a single round could have misled."""
    import statistics

    if len(theirs_ms) != len(mine_ms) or not theirs_ms:
        raise ValueError(f"need the same number (> 0) of rounds for both, got {len(theirs_ms)} and {len(mine_ms)}")
    per_round = [t / m for t, m in zip(theirs_ms, mine_ms)]
    return statistics.median(per_round), _spread(per_round)


def fp8_like_for_like(fp8_matmul, shapes=((8192, 8192, 8192),), rounds: int = 7, rep_ms: float = 100,
                      row_major_b: bool = True) -> dict:
    """The workbook's ``fp8_matmul(a, b, scale_a, scale_b, precise=...)`` against ``torch._scaled_mm`` in the same
    accumulation mode: precise (``precise=True`` against ``use_fast_accum=False``, both adding the tensor cores'
    partial sums into fp32 every so often) and fast (``precise=False`` against ``use_fast_accum=True``, neither
    does). Per-tensor scales, same FP8 operands, b column-major (K contiguous: the layout both want); with
    ``row_major_b`` also fp8_matmul fast on a row-major b (its transposing copy included in the time).

    All variants of a shape are timed in ``rounds`` interleaved rounds after a settle. Per shape: ``tflops`` (median
    of the rounds) and ``tflops_range`` (lowest and highest round) of each variant, and the ratios ``precise`` and
    ``fast`` (_scaled_mm's time / fp8_matmul's, so above 1 means fp8_matmul is faster): the median of the per-round
    ratios, with their range. Each variant is first checked against ``_scaled_mm`` precise (bf16's tolerance; three
    times looser for the fast modes)."""
    device.require_gpu("Timing FP8 matmuls")
    if not device.has_fp8():
        raise RuntimeError("this GPU has no FP8 tensor cores (compute capability 8.9+ needed)")
    bf = torch.bfloat16
    out = {"rounds": rounds, "rep_ms": rep_ms, "shapes": {}}
    for m, n, k in progress(shapes, "fp8 like for like"):
        x = torch.randn(m, k, device="cuda")
        y = torch.randn(n, k, device="cuda")  # b = y.t(): K contiguous, as torch._scaled_mm requires
        qa, sa = precision.fp8_quantize(x)
        qy, sb = precision.fp8_quantize(y)
        qb = qy.t()
        del x, y
        fns = {"fp8_matmul precise": lambda: fp8_matmul(qa, qb, sa, sb, precise=True),
               "_scaled_mm precise": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf),
               "fp8_matmul fast": lambda: fp8_matmul(qa, qb, sa, sb, precise=False),
               "_scaled_mm fast": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf,
                                                          use_fast_accum=True)}
        if row_major_b:
            qb_rows = qb.contiguous()
            fns[FP8_ROW_MAJOR] = lambda: fp8_matmul(qa, qb_rows, sa, sb, precise=False)
        want = fns["_scaled_mm precise"]()
        top = want.abs().max().item()
        # precise modes to bf16's tolerance; fast accumulation drifts further at large K (an H100 run had 1 element
        # of 67 million 1.3% off at 8192^3), so those are checked for computing the product, not for precision
        tight, loose = dict(rtol=8e-3, atol=4e-3 * top), dict(rtol=3e-2, atol=1e-2 * top)
        for name, fn in fns.items():  # also compiles and autotunes each variant before timing
            torch.testing.assert_close(fn(), want, **(tight if "precise" in name else loose),
                                       msg=lambda msg, name=name: f"{name}: {msg}")
        settle(fns["_scaled_mm precise"], seconds=1.0)
        runs = interleaved(fns, rounds=rounds, rep_ms=rep_ms)
        flops = 2 * m * n * k
        row = {"tflops": {}, "tflops_range": {}, "ms": {}}
        for name, r in runs.items():
            row["tflops"][name] = flops / r.median_ms / 1e9
            row["tflops_range"][name] = _spread([flops / t / 1e9 for t in r.medians_ms])
            row["ms"][name] = r.median_ms
        for mode, (mine, theirs) in (("precise", FP8_PRECISE), ("fast", FP8_FAST)):
            row[mode], row[f"{mode}_range"] = round_ratios(runs[theirs].medians_ms, runs[mine].medians_ms)
        if row_major_b:
            row["row_major_cost"] = runs[FP8_ROW_MAJOR].median_ms / runs["fp8_matmul fast"].median_ms
        out["shapes"]["x".join(map(str, (m, n, k)))] = row
    return out


def format_like_for_like(res: dict) -> str:
    """:func:`fp8_like_for_like`'s result as a table: TFLOP/s (median, and the rounds' range) and both ratios."""
    names = [*FP8_PRECISE, *FP8_FAST]
    lines = [f"TFLOP/s, median of {res['rounds']} interleaved rounds (lowest-highest round); ratio = "
             f"_scaled_mm's time / fp8_matmul's in the same mode, median of the rounds (range)",
             f"{'M x N x K':<18}" + "".join(f"{n:>22}" for n in names) + f"{'precise/precise':>22}{'fast/fast':>20}"]
    for shape, r in res["shapes"].items():
        cells = "".join(f"{r['tflops'][n]:>8,.0f} ({r['tflops_range'][n][0]:,.0f}-{r['tflops_range'][n][1]:,.0f})"
                        .rjust(22) for n in names)
        ratios = "".join(f"{r[m]:.3f} ({r[m + '_range'][0]:.2f}-{r[m + '_range'][1]:.2f})".rjust(w)
                         for m, w in (("precise", 22), ("fast", 20)))
        lines.append(f"{shape:<18}{cells}{ratios}")
    if any("row_major_cost" in r for r in res["shapes"].values()):
        lines.append("fp8_matmul fast with a row-major b (the transposing copy inside the call), time / with a "
                     "column-major b: " + ", ".join(f"{s} {r['row_major_cost']:.2f}x" for s, r in res["shapes"].items()
                                                    if "row_major_cost" in r))
    return "\n".join(lines)


def fp8_accuracy_modes(fp8_matmul, m: int = 2048, n: int = 2048, ks=(1024, 8192, 32768)) -> dict:
    """Relative error (normwise) against the float64 product of the same FP8 values as K grows, for fp8_matmul and
    ``torch._scaled_mm`` each in precise and fast accumulation: where the tensor cores' reduced-precision
    accumulation shows. Keys as :func:`accuracy_rows` names them."""
    device.require_gpu("FP8 accuracy")
    bf = torch.bfloat16
    out = {"m": m, "n": n, "k": list(ks), **{name: [] for name in ACCURACY_NAMES}}
    for k in progress(ks, "fp8 accuracy"):
        x = torch.randn(m, k, device="cuda")
        y = torch.randn(n, k, device="cuda")
        qa, sa = precision.fp8_quantize(x)
        qy, sb = precision.fp8_quantize(y)
        ref = (qa.double() * sa.double()) @ (qy.double() * sb.double()).t()
        got = {"fp8_matmul precise": fp8_matmul(qa, qy.t(), sa, sb, precise=True),
               "fp8_matmul fast": fp8_matmul(qa, qy.t(), sa, sb, precise=False),
               "_scaled_mm precise": torch._scaled_mm(qa, qy.t(), scale_a=sa, scale_b=sb, out_dtype=bf),
               "_scaled_mm fast": torch._scaled_mm(qa, qy.t(), scale_a=sa, scale_b=sb, out_dtype=bf,
                                                   use_fast_accum=True)}
        for name, c in got.items():
            out[name].append(precision.rel_error(c, ref))
    return out


ACCURACY_NAMES = ("fp8_matmul precise", "fp8_matmul fast", "_scaled_mm precise", "_scaled_mm fast")


def accuracy_rows(acc: dict) -> dict:
    """``{name: [error per K]}`` under :data:`ACCURACY_NAMES`, in that order, from :func:`fp8_accuracy_modes`'s result
    or the recorded one (the same names); series a result lacks are left out."""
    return {name: acc[name] for name in ACCURACY_NAMES if isinstance(acc.get(name), list)}
