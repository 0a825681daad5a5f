"""The launch parameters of the quantized GEMVs (lesson 07's kernels, which lesson 11 runs too), in one place: the
block sizes of every GEMV path on a GPU (:data:`CONFIGS`) and in Triton's interpreter (:data:`CPU_CONFIGS`), and the
batch sizes M at which :func:`kernels.w8a16_gemv` and :func:`kernels.w4a16_gemv` switch paths. The GPU values were
measured on an H100; the explorations that chose them are logged in ``lab/README.md``. The interpreter gets bigger
blocks and fewer programs, which is what makes it fast.
"""
from __future__ import annotations

import os

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

CONFIGS = {
    "w8_rows": dict(BLOCK_N=8, BLOCK_K=1024, STAGES=3, num_warps=4),
    "w8_dot": dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=4),  # M up to 16
    "w8_dot_wide": dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=4),  # M 17..64
    "w8_dot_big": dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4),  # M above 64
    "w4_rows": dict(BLOCK_N=4, BLOCK_W=128, num_warps=1),
    "w4_dot": dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=3),
    # M up to 16: the fastest tile-major configuration at M = 1 on the lesson's three shapes (and the fastest on the
    # row layout)
    "w4_tc": dict(BLOCK_N=128, NSTAGE=3, CTAS_PER_SM=4, num_warps=4),
    "w4_tc_wide": dict(MX=64, BLOCK_N=128, NSTAGE=3, CTAS_PER_SM=2, num_warps=4),  # M > 16 (MX: at most 64 columns)
    "w8_rows_max_m": 1,  # M up to this uses the rows path, above it the dot path (crossover measured on the H100)
    "w4_rows_max_m": 4,
    "w4_tc_max_m": 1 << 30,  # every M takes the tc path where it can run (bf16 x, sm_90, group >= 64): it was the
    # fastest int4 path at every M from 1 to 256
}
CPU_CONFIGS = {
    "w8_rows": dict(BLOCK_N=32, BLOCK_K=256, STAGES=1),
    "w8_dot": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64),
    "w8_dot_wide": dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64),
    "w8_dot_big": dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=64),
    "w4_rows": dict(BLOCK_N=32, BLOCK_W=32),
    "w4_dot": dict(BLOCK_M=16, BLOCK_N=32),
    "w4_tc": dict(BLOCK_N=32, NSTAGE=1, SPLIT=3),
    "w4_tc_wide": dict(MX=32, BLOCK_N=32, NSTAGE=1, SPLIT=2),
    "w8_rows_max_m": 4,
    "w4_rows_max_m": 4,
    "w4_tc_max_m": 0,  # off in the interpreter unless asked for (tc=True): it runs there, slowly, in float32
}


def w8_config_name(m: int, rows: bool) -> str:
    """Which of :data:`CONFIGS`' int8 entries a call with M rows of x uses."""
    if rows:
        return "w8_rows"
    return "w8_dot" if m <= 16 else "w8_dot_wide" if m <= 64 else "w8_dot_big"


def configs() -> dict:
    return CPU_CONFIGS if INTERPRETED else CONFIGS

