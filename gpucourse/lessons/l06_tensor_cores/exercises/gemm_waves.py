"""Lesson 06's first exercise: how many tiles and waves a GEMM's output makes on a GPU, and how full the last wave is.

Judged (``JudgedExercise``): every case draws fresh shapes, tiles and SM counts from the check's secret seed and
compares the learner's dict with :func:`gpucourse.lessons.l06_tensor_cores.waves.gemm_waves`, shape by shape.
"""
from __future__ import annotations

import math

from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

from .. import waves

STATEMENT = """\
Write `gemm_waves(M, N, tile_m, tile_n, num_sms)` that returns a dict with three entries for an M×N GEMM output cut
into tile_m×tile_n tiles, one tile per program, run on a GPU with `num_sms` SMs that each hold one program at a time:
  "tiles": how many tiles cover the output (an int; a partial tile at an edge is a whole tile),
  "waves": tiles / num_sms, as a fraction (3.9 means three full waves and a fourth 90 % full),
  "last_wave_occupancy": the fraction of the SMs busy in the last wave (a float in (0, 1]; 1.0 when it is full).
All arguments are positive ints. Write the arithmetic yourself; `math` is all you need.
"""

N_DRAWS = 12  # shapes per case


def _pick(gen, choices):
    import torch

    return choices[int(torch.randint(len(choices), (1,), generator=gen))]


def _randint(gen, lo: int, hi: int) -> int:
    import torch

    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def draws(params: dict, seed: int) -> list:
    """The (M, N, tile_m, tile_n, num_sms) shapes of one case, from ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    family, out = params["family"], []
    for _ in range(N_DRAWS):
        if family == "sweep":  # the lesson's N sweep on an H100: M = 8192, 128×256 tiles, 132 SMs
            out.append((8192, 16 * _randint(gen, 64, 256), 128, 256, 132))
        elif family == "ragged":  # neither M nor N a multiple of its tile
            tm, tn = _pick(gen, [64, 128, 256]), _pick(gen, [64, 128, 256])
            m = tm * _randint(gen, 1, 40) + _randint(gen, 1, tm - 1)
            n = tn * _randint(gen, 1, 40) + _randint(gen, 1, tn - 1)
            out.append((m, n, tm, tn, _pick(gen, [40, 58, 108, 114, 132])))
        elif family == "full":  # the tiles fill every wave exactly
            sms = _pick(gen, [40, 108, 132])
            tm, tn = _pick(gen, [64, 128]), _pick(gen, [128, 256])
            tiles_m = sms // _pick(gen, [1, 2, 4]) if sms % 4 == 0 else sms
            tiles_n = (sms // math.gcd(sms, tiles_m)) * _randint(gen, 1, 3)
            out.append((tiles_m * tm - _randint(gen, 0, tm - 1), tiles_n * tn - _randint(gen, 0, tn - 1), tm, tn,
                        sms))
        elif family == "under one wave":  # fewer tiles than SMs
            sms = _pick(gen, [108, 132])
            out.append((_randint(gen, 1, 4 * 128), _randint(gen, 1, 5 * 128), 128, 128, sms))
        elif family == "tiny":  # a 1×1 output, a single row, a single column
            sms = _pick(gen, [40, 132])
            out.append(_pick(gen, [(1, 1, 128, 256, sms), (1, _randint(gen, 1, 9000), 64, 64, sms),
                                   (_randint(gen, 1, 9000), 1, 64, 64, sms)]))
        elif family == "T4":  # 40 SMs, 64×64 tiles
            out.append((_randint(gen, 1, 4096), _randint(gen, 1, 4096), 64, 64, 40))
        else:
            raise ValueError(f"unknown family {family!r}")
    return out


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def compare_answer(shape: tuple, expected: dict, got) -> list:
    """Problems with one answer, naming the shape."""
    M, N, tm, tn, sms = shape
    where = f"M={M}, N={N}, tile {tm}×{tn}, {sms} SMs"
    if not isinstance(got, dict):
        return [f"{where}: returned {type(got).__name__}, expected a dict with 'tiles', 'waves' and "
                f"'last_wave_occupancy'"]
    problems = []
    for key in ("tiles", "waves", "last_wave_occupancy"):
        if key not in got:
            problems.append(f"{where}: {key!r} missing from your dict")
            continue
        g, want = _number(got[key]), expected[key]
        if g is None or not math.isfinite(g):
            problems.append(f"{where}: {key!r} must be a number, got {got[key]!r:.40}")
        elif abs(g - want) > 1e-9 * abs(want):
            problems.append(f"{where}: {key!r} expected {want:.6g}, got {g:.6g}")
    extra = sorted(set(map(str, got)) - {"tiles", "waves", "last_wave_occupancy"})
    if extra:
        problems.append(f"{where}: unexpected entries {extra[:5]}")
    return problems


def judge(fn, params: dict, seed: int) -> list:
    """The learner's ``fn`` on fresh shapes; expected answers computed before ``fn`` is called."""
    shapes = draws(params, seed)
    expected = [waves.gemm_waves(*s) for s in shapes]
    problems = []
    for shape, want in zip(shapes, expected):
        with trapped(waves.gemm_waves):  # the course's own answer is off limits
            got = fn(*shape)
        problems += compare_answer(shape, want, got)
        if len(problems) >= 5:
            break
    return problems


EXERCISE = JudgedExercise(
    id="gemm_waves",
    function="gemm_waves",
    signature="gemm_waves(M: int, N: int, tile_m: int, tile_n: int, num_sms: int) -> dict",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("H100 N sweep: M=8192, 128×256 tiles, 132 SMs", {"family": "sweep"}),
        Case("M and N not multiples of the tile (ceil division)", {"family": "ragged"}),
        Case("tiles fill the last wave exactly (occupancy 1.0)", {"family": "full"}),
        Case("fewer tiles than SMs (less than one wave)", {"family": "under one wave"}),
        Case("1×1 output, one row, one column", {"family": "tiny"}),
        Case("a T4: 40 SMs, 64×64 tiles", {"family": "T4"}),
    ),
    judge=judge,
)
