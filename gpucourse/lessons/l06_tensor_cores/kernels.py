"""A fixed-tile Triton matmul for the wave experiments: no autotuning, so the tile (and with it the staircase of
tiles and waves) stays the same at every N, unlike cuBLAS, which picks a kernel per shape.

One program per output tile, tiles walked in groups of GROUP_M rows (for L2 reuse, as in lesson 05), with the kit's
tile loop (:mod:`gpucourse.tiles`). bf16 or fp16 operands, fp32 accumulation, output in the inputs' dtype. Every edge
is masked, so any M, N, K works; on a GPU an unaligned row length still works but is slower, which the alignment
section measures.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from gpucourse.tiles import grouped_tile, tile_dot

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# The tile that shows the staircase on an H100: 128×256 with 64-wide K steps, 8 warps, 3 stages. Its operand
# buffers (3 × (128×64 + 64×256) × 2 B = 144 KiB) leave room for one program per SM, so tiles run in waves of #SMs.
WAVE_TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)
CPU_TILE = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=1)


@triton.jit
def fixed_tile_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tile_dot(a_ptr, b_ptr, rm, rn, M, N, K, sam, sak, sbk, sbn, BLOCK_M, BLOCK_N, BLOCK_K, UPCAST)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def fixed_tile_matmul(a: torch.Tensor, b: torch.Tensor, tile: dict | None = None) -> torch.Tensor:
    """``a @ b`` with one fixed tile (default :data:`WAVE_TILE` on a GPU, a small one in CPU mode)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"fixed_tile_matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit (M×K, K×N)")
    if a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"fixed_tile_matmul takes two float16 or two bfloat16 tensors, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"fixed_tile_matmul: a is on {a.device}, b on {b.device}")
    t = dict(tile or (CPU_TILE if INTERPRETED else WAVE_TILE))
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, t["BLOCK_M"]) * triton.cdiv(N, t["BLOCK_N"]),)
    fixed_tile_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                            c.stride(1), BLOCK_M=t["BLOCK_M"], BLOCK_N=t["BLOCK_N"], BLOCK_K=t["BLOCK_K"], GROUP_M=8,
                            UPCAST=INTERPRETED and a.dtype == torch.bfloat16, num_warps=t.get("num_warps", 4),
                            num_stages=t.get("num_stages", 2))
    return c
