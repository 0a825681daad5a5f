"""Lesson 06's second exercise: choose the tile that the wave model says is fastest for a GEMM shape.

Judged (``JudgedExercise``): every case draws fresh shapes and per-SM tile speeds from the check's secret seed; the
judge times every candidate with :func:`gpucourse.lessons.l06_tensor_cores.waves.predicted_ms` (as
``waves.choose_tile`` does) so that where two tiles predict the same time (to 1e-9), either is accepted.
"""
from __future__ import annotations

from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

from .. import waves
from .gemm_waves import _pick, _randint

STATEMENT = """\
Write `choose_tile(M, N, K, tiles, num_sms)` that returns the tile `(tile_m, tile_n)`, one of the keys of `tiles`,
for which the wave model predicts the shortest time for an M×N×K GEMM. `tiles` maps each candidate
`(tile_m, tile_n)` to the TFLOP/s one SM reaches with it (bigger tiles reuse more data, so they run faster per SM).
The model: one program per tile, one program per SM at a time, so the GPU runs ceil(tiles / num_sms) waves (tiles
counted with ceil division in M and N, as in `gemm_waves`), and each wave takes as long as one tile:
2 * tile_m * tile_n * K flops at that tile's TFLOP/s. Return a tuple. If two tiles tie, either is right.
"""

N_DRAWS = 10
SMS = {"H100": 132, "A100": 108, "T4": 40}


def _rates(gen, family: str) -> dict:
    """Candidate tiles and per-SM TFLOP/s: bigger tiles faster, with noise, so different shapes pick differently."""
    import torch

    base = {"T4": 1.0, "A100": 2.4, "H100": 5.2}[family if family in SMS else "H100"]
    cands = [(64, 64), (64, 128), (128, 128), (128, 256), (256, 128)]
    k = _randint(gen, 3, len(cands))
    idx = sorted(torch.randperm(len(cands), generator=gen)[:k].tolist())
    out = {}
    for i in idx:
        tm, tn = cands[i]
        reuse = (tm * tn / (tm + tn)) / (256 * 128 / 384)  # 1.0 for the largest tiles
        out[(tm, tn)] = round(base * (0.55 + 0.45 * reuse) * (0.95 + 0.1 * float(torch.rand(1, generator=gen))), 4)
    return out


def draws(params: dict, seed: int) -> list:
    """The (M, N, K, tiles, num_sms) problems of one case, from ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    family, out = params["family"], []
    for _ in range(N_DRAWS):
        sms = SMS.get(family, 132)
        if family == "square":
            m = n = 256 * _randint(gen, 4, 64)
        elif family == "skinny":
            m, n = 256 * _randint(gen, 8, 64), 16 * _randint(gen, 1, 32)
        elif family == "near a wave boundary":  # 128×256 tiles just past a whole number of waves
            n = 256 * _pick(gen, [3, 5, 7, 9, 11]) + 16 * _randint(gen, 1, 8)
            m = 8192
        else:  # another GPU, any shape
            m, n = _randint(gen, 1, 12000), _randint(gen, 1, 12000)
        out.append((m, n, 64 * _randint(gen, 1, 128), _rates(gen, family), sms))
    return out


def judge(fn, params: dict, seed: int) -> list:
    """The learner's ``fn`` on fresh problems; the expected tiles (and ties) computed before ``fn`` is called."""
    problems = []
    for m, n, k, tiles, sms in draws(params, seed):
        times = {t: waves.predicted_ms(m, n, k, t[0], t[1], sms, r) for t, r in tiles.items()}
        best = min(times.values())
        right = [t for t, ms in times.items() if ms <= best * (1 + 1e-9)]
        with trapped(waves.choose_tile):  # the course's own answer is off limits
            got = fn(m, n, k, dict(tiles), sms)
        where = f"M={m}, N={n}, K={k}, {sms} SMs, tiles {tiles}"
        key = got
        if not isinstance(got, tuple):
            problems.append(f"{where}: returned {type(got).__name__} {got!r:.40}, expected a tuple "
                            f"(tile_m, tile_n)")
        elif key not in times:
            problems.append(f"{where}: {got!r:.40} is not one of the candidate tiles")
        elif key not in right:
            problems.append(f"{where}: expected {right[0]} (predicted {times[right[0]]:.4f} ms), got {key} "
                            f"(predicted {times[key]:.4f} ms)")
        if len(problems) >= 4:
            break
    return problems


EXERCISE = JudgedExercise(
    id="choose_tile",
    function="choose_tile",
    signature="choose_tile(M: int, N: int, K: int, tiles: dict, num_sms: int) -> tuple",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("H100, square GEMMs", {"family": "square"}),
        Case("H100, skinny outputs (N from 16 to 512)", {"family": "skinny"}),
        Case("H100, N just past a whole number of waves", {"family": "near a wave boundary"}),
        Case("an A100 (108 SMs), any shape", {"family": "A100"}),
        Case("a T4 (40 SMs), any shape", {"family": "T4"}),
    ),
    judge=judge,
)
