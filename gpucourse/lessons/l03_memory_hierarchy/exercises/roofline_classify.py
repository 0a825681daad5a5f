"""Lesson 03's first exercise: arithmetic intensity and the bound of each operation, from its description.

Judged (``Exercise.judge``) numerically against ``gpucourse.roofline``: sizes are drawn afresh for every check and the ceilings are those
of this device (its datasheet; in CPU mode an H100 SXM's datasheet, since there is no GPU to describe) and of two
other GPUs from the spec table, so an answer copied from one run does not pass the next.
"""
from __future__ import annotations

import math

from gpucourse import roofline
from gpucourse.grading.exercise import Case, Exercise
from gpucourse.grading.traps import trapped

STATEMENT = """\
Write `roofline_classify(ops, ceilings)` that returns a dict with one entry per operation in `ops`:
`name -> (intensity, bound)`, where `intensity` is the arithmetic intensity in flops per byte (a float) and
`bound` is "memory" if the intensity is below the device's ops:byte ratio and "compute" otherwise.
`ceilings` is a dict `{"gbps": memory bandwidth in GB/s (1e9 B/s), "tflops": math rate in TFLOP/s (1e12 flop/s)}`.
`ops` maps names to plain descriptions; count flops and bytes exactly as below (s = bytes per element of "dtype":
float32 4, float16 and bfloat16 2), moving each input once and writing each output once:
  {"kind": "elementwise", "n", "inputs", "flops_per_element", "dtype"}: flops = flops_per_element * n,
      bytes = (inputs + 1) * n * s
  {"kind": "reduction", "rows", "cols", "dtype"} (sum of each row): flops = rows * cols, bytes = (rows*cols + rows) * s
  {"kind": "gemv", "M", "K", "dtype"} (y = A x, A is M x K): flops = 2*M*K, bytes = (M*K + K + M) * s
  {"kind": "gemm", "M", "N", "K", "dtype"} (C = A B): flops = 2*M*N*K, bytes = (M*K + K*N + M*N) * s
Write the arithmetic yourself: calling gpucourse.roofline defeats the purpose.
"""


def make_inputs(params: dict, gen) -> tuple:
    import torch

    def pick(choices):
        return choices[int(torch.randint(len(choices), (1,), generator=gen))]

    p2 = [2**k for k in range(10, 15)]
    ops = {
        "relu": {"kind": "elementwise", "n": pick(p2) * pick(p2), "inputs": 1, "flops_per_element": 1,
                 "dtype": "float32"},
        "add": {"kind": "elementwise", "n": pick(p2) * 1000 + 7, "inputs": 2, "flops_per_element": 1,
                "dtype": pick(["float16", "bfloat16", "float32"])},
        "swish_residual": {"kind": "elementwise", "n": pick(p2) * pick(p2), "inputs": 2, "flops_per_element": 5,
                           "dtype": "float16"},
        "row_sum": {"kind": "reduction", "rows": pick(p2), "cols": pick(p2) * 3, "dtype": "float32"},
        "gemv": {"kind": "gemv", "M": pick(p2), "K": pick(p2), "dtype": "bfloat16"},
        "gemm_skinny": {"kind": "gemm", "M": pick(p2) * 2, "N": pick([16, 32, 64, 128, 256]), "K": pick(p2) * 2,
                        "dtype": "bfloat16"},
        "gemm_square": {"kind": "gemm", "M": pick(p2), "N": pick(p2), "K": pick(p2), "dtype": "bfloat16"},
    }
    c = roofline.device_ceilings(measure=False) if params["gpu"] == "this device" else \
        roofline.spec_ceilings(params["gpu"])
    return ops, {"gbps": c.gbps, "tflops": c.tflops}


def reference(ops: dict, ceilings: dict) -> dict:
    c = roofline.Ceilings(gbps=ceilings["gbps"], tflops=ceilings["tflops"], source="exercise")
    out = {}
    for name, d in ops.items():
        op = roofline.from_dict(d, name=name)
        out[name] = (op.intensity, roofline.classify(op, c))
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
    ratio = ceilings["tflops"] * 1e12 / (ceilings["gbps"] * 1e9)
    with trapped(roofline.classify, roofline.predict, roofline.table):  # the course's own answer is off limits
        got = fn(copy.deepcopy(ops), dict(ceilings))
    return compare_answers(expected, got, ratio)


SCALES = (1e3, 1e-3, 1e6, 1e-6, 1e9, 1e-9)  # the factors a units slip makes (GB vs TB, GFLOP vs TFLOP, KB vs B)


_TIMES = {1e3: "1000x", 1e-3: "1/1000 of", 1e6: "1e6x", 1e-6: "1/1e6 of", 1e9: "1e9x", 1e-9: "1/1e9 of"}


def units_problem(expected: dict, got: dict, ratio: float | None = None) -> str | None:
    """One line when the answer is right up to a units slip: every intensity off by the same power of 1000, or every
    intensity right and the bounds, some "memory" and some "compute", what an ops:byte ratio off by a power of 1000
    gives. None otherwise."""
    try:
        pairs = {n: (float(got[n][0]), got[n][1]) for n in expected}
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    ints = {n: (intensity, pairs[n][0]) for n, (intensity, _) in expected.items()}
    for f in SCALES:
        if all(math.isfinite(g) and abs(g - f * i) <= 1e-6 * abs(f * i) for i, g in ints.values()):
            return (f"every intensity is {_TIMES[f]} the right value (all {len(ints)} ops): intensity is flops per "
                    f"byte -- count flops and bytes (not GFLOP, KB or MB) -- and compare it with the ops:byte ratio "
                    f"tflops * 1e12 / (gbps * 1e9); fix the units first (the bounds follow from the intensities)")
    if ratio is None or not all(abs(g - i) <= 1e-6 * abs(i) for i, g in ints.values()):
        return None
    bounds = {n: b for n, (_, b) in pairs.items()}
    if bounds == {n: b for n, (_, b) in expected.items()} or len(set(bounds.values())) < 2:
        return None  # right, or one bound for all (any ratio beyond every intensity gives that: no factor to name)
    for f in SCALES:
        if bounds == {n: "memory" if i < f * ratio else "compute" for n, (i, _) in expected.items()}:
            return (f"your intensities are right, but every bound is what an ops:byte ratio {_TIMES[f]} the device's "
                    f"gives ({f * ratio:.4g} instead of {ratio:.4g} flop/B): check its units -- tflops is in "
                    f"1e12 flop/s and gbps in 1e9 B/s, so the ratio is tflops * 1e12 / (gbps * 1e9)")
    return None


def compare_answers(expected: dict, got, ratio: float | None = None) -> list:
    """Problems with the learner's dict against the expected one, each naming the operation it is about; a units
    slip (every intensity, or the ops:byte ratio, off by a power of 1000) is one line instead of one per op.
    ``ratio``: the device's ops:byte ratio in flop/B, for the bounds' units check."""
    if not isinstance(got, dict):
        return [f"returned {type(got).__name__}, expected a dict name -> (intensity, bound)"]
    units = units_problem(expected, got, ratio)
    if units is not None and set(map(str, got)) == set(expected):
        return [units]
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
            ratio = f" ({g / intensity:.3g}x the right value)" if intensity and math.isfinite(g) else ""
            problems.append(f"op {name!r}: intensity expected {intensity:.6g} flop/B, got {g:.6g}{ratio}")
        if g_bound != bound:
            problems.append(f"op {name!r}: bound expected {bound!r}, got {g_bound!r}")
    extra = sorted(set(map(str, got)) - set(expected))
    if extra:
        problems.append(f"unexpected entries: {extra[:5]}")
    return problems


EXERCISE = Exercise(
    id="roofline_classify",
    function="roofline_classify",
    signature="roofline_classify(ops: dict, ceilings: dict) -> dict",
    statement=STATEMENT,
    kind="none",
    make_inputs=None,  # judged: ``judge`` makes the inputs and the expected answer itself
    reference=None,
    cases=(
        Case("this device's datasheet (an H100 SXM's in CPU mode)", {"gpu": "this device"}),
        Case("a T4 (datasheet)", {"gpu": "T4"}),
        Case("an A100 80GB (datasheet)", {"gpu": "A100-80GB"}),
    ),
    determinism=None,
    judge=judge,
)
