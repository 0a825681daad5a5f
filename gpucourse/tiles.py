"""The grouped-tile matmul loop, as Triton helpers a kernel calls (lessons 06 and 09 build their matmuls on it).

:func:`grouped_tile` says which output tile a program computes: tiles are walked in groups of ``GROUP_M`` tile rows,
so the programs running at the same time share rows of A and columns of B in L2 (lesson 05's ordering).
:func:`tile_dot` accumulates that tile over K in fp32, every edge masked, so any M, N, K works. Triton inlines
both into the calling kernel: a kernel that calls them compiles as if their lines were written in it.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n): the tile row and column of program ``pid``, tiles taken GROUP_M rows at a time."""
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n  # programs per group of GROUP_M tile rows
    first_m = (pid // per_group) * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)  # the last group may hold fewer rows
    pid_m = first_m + (pid % per_group) % rows  # down a column of the group first ...
    pid_n = (pid % per_group) // rows  # ... then across to the next column
    return pid_m, pid_n


@triton.jit
def tile_dot(a_ptr, b_ptr, rm, rn, M, N, K, sam, sak, sbk, sbn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, UPCAST: tl.constexpr):
    """The fp32 sum over K of A[rm, k] · B[k, rn] for the rows ``rm`` and columns ``rn`` of one tile, BLOCK_K at a
    time; out-of-range rows, columns and K steps load as zero. ``UPCAST``: multiply in fp32 (the interpreter's
    ``tl.dot`` gets bf16 wrong, triton-lang/triton#11584; exact in fp32)."""
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        if UPCAST:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    return acc


def scratch_allocator(device):
    """Triton's allocator for global scratch memory (where device-side TMA descriptors live), on ``device``: pass it
    to ``triton.set_allocator`` before launching a kernel that calls ``tl.make_tensor_descriptor``."""
    import torch

    def allocate(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device=device)
    return allocate
