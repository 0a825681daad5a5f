"""Lesson 03's first exercise: arithmetic intensity and the bound of each operation, from its description.

Judged (``JudgedExercise``) numerically: sizes are drawn afresh for every check and the ceilings (bandwidth and both
math roofs, tensor cores and CUDA cores) are those of this device (its datasheet; in CPU mode an H100 SXM's, since
there is no GPU to describe) and of two other GPUs from the spec table, so an answer copied from one run does not pass
the next. Two of the ops drawn fall between the two ridges, so an answer that judges every op against one ops:byte
ratio (the single roof the lesson retracts) fails.
"""
from __future__ import annotations

import math

from gpucourse import roofline
from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

STATEMENT = """\
Write `roofline_classify(ops, ceilings)` that returns a dict with one entry per operation in `ops`:
`name -> (intensity, bound)`, where `intensity` is the arithmetic intensity in flops per byte (a float) and
`bound` is "memory" or "compute". A GPU has two math ceilings, so two ridges: judge each op against the ridge of the
unit it runs on (its "unit" field). `bound` is "memory" if the intensity is below that unit's ops:byte ratio and
"compute" otherwise.
`ceilings` is a dict `{"gbps": memory bandwidth in GB/s (1e9 B/s), "tensor_tflops": the tensor cores' math rate,
"cuda_tflops": the CUDA cores' fp32 rate}`, rates in TFLOP/s (1e12 flop/s). The ops:byte ratio of a unit is its
rate * 1e12 / (gbps * 1e9).
`ops` maps names to plain descriptions, each with a "unit" ("tensor cores" or "CUDA cores"); count flops and bytes
exactly as below (s = bytes per element of "dtype": float32 4, float16 and bfloat16 2), moving each input once and
writing each output once:
  {"kind": "elementwise", "n", "inputs", "flops_per_element", "dtype", "unit"}: flops = flops_per_element * n,
      bytes = (inputs + 1) * n * s
  {"kind": "reduction", "rows", "cols", "dtype", "unit"} (sum of each row): flops = rows * cols,
      bytes = (rows*cols + rows) * s
  {"kind": "gemv", "M", "K", "dtype", "unit"} (y = A x, A is M x K): flops = 2*M*K, bytes = (M*K + K + M) * s
  {"kind": "gemm", "M", "N", "K", "dtype", "unit"} (C = A B): flops = 2*M*N*K, bytes = (M*K + K*N + M*N) * s
Write the arithmetic yourself: calling gpucourse.roofline defeats the purpose.
"""

UNITS = ("tensor cores", "CUDA cores")


def _ceilings(gpu: str) -> dict:
    """The exercise's ceilings for a case: datasheet figures, both math roofs (an H100 SXM's where this device has no
    entry in the spec table, or in CPU mode)."""
    c = roofline.device_ceilings(measure=False, fp32=True) if gpu == "this device" else \
        roofline.spec_ceilings(gpu, fp32=True)
    if not c.fp32_tflops or c.fp32_tflops >= c.tflops:  # no second roof to judge against: use the H100's
        c = roofline.spec_ceilings("H100-SXM", fp32=True)
    return {"gbps": c.gbps, "tensor_tflops": c.tflops, "cuda_tflops": c.fp32_tflops}


def ridges(ceilings: dict) -> dict:
    """Each unit's ops:byte ratio in flop/B."""
    bw = ceilings["gbps"] * 1e9
    return {"tensor cores": ceilings["tensor_tflops"] * 1e12 / bw, "CUDA cores": ceilings["cuda_tflops"] * 1e12 / bw}


def make_inputs(params: dict, gen) -> tuple:
    """Fresh ops for one case: some far below both ridges, a large square GEMM, and two that fall BETWEEN the ridges
    (an fp32 GEMM on the CUDA cores, compute-bound there; a skinny bf16 GEMM on the tensor cores, memory-bound
    there), so an answer that judges every op against one ratio fails."""
    import torch

    def pick(choices):
        return choices[int(torch.randint(len(choices), (1,), generator=gen))]

    ceilings = _ceilings(params["gpu"])
    r = ridges(ceilings)
    lo, hi = r["CUDA cores"] * 1.25, r["tensor cores"] / 1.25  # between the ridges, with a margin on each side

    def between(candidates, intensity):
        ok = [c for c in candidates if lo < intensity(c) < hi]
        return pick(ok)

    p2 = [2**k for k in range(10, 15)]
    m_sk, k_sk = pick(p2) * 2, pick(p2) * 2
    n_sk = between([16, 32, 48, 64, 96, 128, 192, 256],
                   lambda n: m_sk * n * k_sk / (m_sk * k_sk + k_sk * n + m_sk * n))  # bf16: 2MNK / (2(...))
    n_sq32 = between(list(range(64, 4097, 32)), lambda n: n / 6)  # fp32 square GEMM: 2n^3 / (3 n^2 * 4) = n / 6
    # the large bf16 GEMM is compute-bound on the tensor cores, with the same margin above their ridge: drawn
    # independently, three sizes of 1024 would put it between the ridges too (1024 / 3 = 341 flop/B)
    m_sq, n_sq, k_sq = pick([(m, n, k) for m in p2 for n in p2 for k in p2
                             if m * n * k / (m * k + k * n + m * n) > r["tensor cores"] * 1.25])
    cc, tc = "CUDA cores", "tensor cores"
    ops = {
        "relu": {"kind": "elementwise", "n": pick(p2) * pick(p2), "inputs": 1, "flops_per_element": 1,
                 "dtype": "float32", "unit": cc},
        "add": {"kind": "elementwise", "n": pick(p2) * 1000 + 7, "inputs": 2, "flops_per_element": 1,
                "dtype": pick(["float16", "bfloat16", "float32"]), "unit": cc},
        "swish_residual": {"kind": "elementwise", "n": pick(p2) * pick(p2), "inputs": 2, "flops_per_element": 5,
                           "dtype": "float16", "unit": cc},
        "row_sum": {"kind": "reduction", "rows": pick(p2), "cols": pick(p2) * 3, "dtype": "float32", "unit": cc},
        "gemv": {"kind": "gemv", "M": pick(p2), "K": pick(p2), "dtype": "bfloat16", "unit": cc},
        "gemm_fp32": {"kind": "gemm", "M": n_sq32, "N": n_sq32, "K": n_sq32, "dtype": "float32", "unit": cc},
        "gemm_skinny": {"kind": "gemm", "M": m_sk, "N": n_sk, "K": k_sk, "dtype": "bfloat16", "unit": tc},
        "gemm_square": {"kind": "gemm", "M": m_sq, "N": n_sq, "K": k_sq, "dtype": "bfloat16", "unit": tc},
    }
    return ops, ceilings


def reference(ops: dict, ceilings: dict) -> dict:
    r = ridges(ceilings)
    out = {}
    for name, d in ops.items():
        op = roofline.from_dict(d, name=name)
        out[name] = (op.intensity, "memory" if op.intensity < r[d["unit"]] else "compute")
    return out


def judge(fn, params: dict, seed: int) -> list:
    """Run the learner's ``fn`` on fresh ops for this case and list what is wrong, naming each operation.

    The ops and ceilings come from ``seed`` (secret, fresh per check); the expected answer is computed from private
    copies before ``fn`` sees its own copies, so nothing ``fn`` does to its arguments changes the verdict.
    """
    import copy

    import torch

    ops, ceilings = make_inputs(params, torch.Generator().manual_seed(seed))
    expected = reference(copy.deepcopy(ops), dict(ceilings))
    r = ridges(ceilings)
    units = {name: d["unit"] for name, d in ops.items()}
    with trapped(roofline.classify, roofline.predict, roofline.table):  # the course's own answer is off limits
        got = fn(copy.deepcopy(ops), dict(ceilings))
    return compare_answers(expected, got, r, units)


SCALES = (1e3, 1e-3, 1e6, 1e-6, 1e9, 1e-9)  # the factors a units slip makes (GB vs TB, GFLOP vs TFLOP, KB vs B)


_TIMES = {1e3: "1000x", 1e-3: "1/1000 of", 1e6: "1e6x", 1e-6: "1/1e6 of", 1e9: "1e9x", 1e-9: "1/1e9 of"}


def _ratio_of(ratio, units: dict | None, name: str) -> float:
    if isinstance(ratio, dict):
        return ratio[(units or {}).get(name, "tensor cores")]
    return ratio


def units_problem(expected: dict, got: dict, ratio=None, units: dict | None = None) -> str | None:
    """One line when the answer is right up to a slip made once for every op: every intensity off by the same power
    of 1000; or every intensity right and the bounds, some "memory" and some "compute", what ops:byte ratios off by a
    power of 1000 give; or (two ridges: ``ratio`` a dict unit -> flop/B, ``units`` op -> unit) what one ridge used
    for every op gives. None otherwise."""
    try:
        pairs = {n: (float(got[n][0]), got[n][1]) for n in expected}
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    ints = {n: (intensity, pairs[n][0]) for n, (intensity, _) in expected.items()}
    for f in SCALES:
        if all(math.isfinite(g) and abs(g - f * i) <= 1e-6 * abs(f * i) for i, g in ints.values()):
            return (f"every intensity is {_TIMES[f]} the right value (all {len(ints)} ops): intensity is flops per "
                    f"byte -- count flops and bytes (not GFLOP, KB or MB) -- and compare it with the ops:byte ratio "
                    f"of the op's unit, rate * 1e12 / (gbps * 1e9); fix the units first (the bounds follow from the "
                    f"intensities)")
    if ratio is None or not all(abs(g - i) <= 1e-6 * abs(i) for i, g in ints.values()):
        return None
    bounds = {n: b for n, (_, b) in pairs.items()}
    if bounds == {n: b for n, (_, b) in expected.items()}:
        return None
    if isinstance(ratio, dict):  # one ridge for every op: the single-ratio model the lesson retracts
        for unit, rate in (("tensor cores", "tensor_tflops"), ("CUDA cores", "cuda_tflops")):
            if bounds == {n: "memory" if i < ratio[unit] else "compute" for n, (i, _) in expected.items()}:
                wrong = [n for n in expected if (units or {}).get(n) != unit and bounds[n] != expected[n][1]]
                return (f"your intensities are right, but every bound is what the {unit}' ridge "
                        f"({ratio[unit]:.4g} flop/B) gives, for every op: a GPU has two math ceilings, so two "
                        f"ridges -- tensor cores {ratio['tensor cores']:.4g}, CUDA cores {ratio['CUDA cores']:.4g} "
                        f"flop/B -- and each op is judged against the ridge of the unit it runs on (its \"unit\"); "
                        f"wrong here: {', '.join(wrong)}")
    # One bound for all: any ratio beyond every intensity gives it. All "compute" is named (ratios too small: the
    # 1e12 / 1e9 left out); all "memory" is not (more often a guess than a slip).
    uniform = len(set(bounds.values())) < 2
    if uniform and "memory" in bounds.values():
        return None
    for f in SCALES:
        if uniform and f > 1:
            continue
        if bounds == {n: "memory" if i < f * _ratio_of(ratio, units, n) else "compute"
                      for n, (i, _) in expected.items()}:
            if isinstance(ratio, dict):
                said = ", ".join(f"{u} {f * r:.4g} instead of {r:.4g}" for u, r in ratio.items())
            else:
                said = f"{f * ratio:.4g} instead of {ratio:.4g}"
            if uniform:
                return (f"your intensities are right, but every bound is {next(iter(bounds.values()))!r}, what "
                        f"ops:byte ratios {_TIMES[f]} the device's (or further off) give ({said} flop/B): check "
                        f"their units -- the rates are in 1e12 flop/s and gbps in 1e9 B/s, so a ratio is "
                        f"rate * 1e12 / (gbps * 1e9)")
            return (f"your intensities are right, but every bound is what an ops:byte ratio {_TIMES[f]} the device's "
                    f"gives ({said} flop/B): check its units -- the rates are in 1e12 flop/s and gbps in 1e9 B/s, "
                    f"so a ratio is rate * 1e12 / (gbps * 1e9)")
    return None


def compare_answers(expected: dict, got, ratio=None, units: dict | None = None) -> list:
    """Problems with the learner's dict against the expected one, each naming the operation it is about; a slip made
    for every op (every intensity, or the ops:byte ratios, off by a power of 1000; one ridge used for all ops) is one
    line instead of one per op. ``ratio``: the ridges in flop/B, a dict unit -> ratio (``units``: op -> its unit), or
    one float for every op."""
    if not isinstance(got, dict):
        return [f"returned {type(got).__name__}, expected a dict name -> (intensity, bound)"]
    slip = units_problem(expected, got, ratio, units)
    if slip is not None and set(map(str, got)) == set(expected):
        return [slip]
    problems = []
    for name, (intensity, bound) in expected.items():
        if name not in got:
            problems.append(f"op {name!r}: missing from your dict")
            continue
        answer = got[name]
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            problems.append(f"op {name!r}: expected a pair (intensity, bound), got {answer!r:.80}")
            continue
        g_int, g_bound = answer
        try:
            g = float(g_int)
        except (TypeError, ValueError):
            problems.append(f"op {name!r}: intensity must be a number, got {g_int!r:.40}")
            continue
        if not math.isfinite(g) or abs(g - intensity) > 1e-6 * abs(intensity):
            times = f" ({g / intensity:.3g}x the right value)" if intensity and math.isfinite(g) else ""
            problems.append(f"op {name!r}: intensity expected {intensity:.6g} flop/B, got {g:.6g}{times}")
        if g_bound != bound:
            where = ""
            if isinstance(ratio, dict) and units and name in units:
                where = f" (it runs on the {units[name]}: ridge {ratio[units[name]]:.4g} flop/B)"
            problems.append(f"op {name!r}: bound expected {bound!r}, got {g_bound!r}{where}")
    extra = sorted(set(map(str, got)) - set(expected))
    if extra:
        problems.append(f"unexpected entries: {extra[:5]}")
    return problems


EXERCISE = JudgedExercise(
    id="roofline_classify",
    function="roofline_classify",
    signature="roofline_classify(ops: dict, ceilings: dict) -> dict",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("this device's datasheet (an H100 SXM's in CPU mode)", {"gpu": "this device"}),
        Case("an L4 (datasheet)", {"gpu": "L4"}),
        Case("an A100 80GB (datasheet)", {"gpu": "A100-80GB"}),
    ),
    judge=judge,
)
