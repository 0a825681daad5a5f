"""Lesson 09's kernels: residual add + RMSNorm fused in one Triton kernel (the reference of the exercise
``fused_rmsnorm_residual``), the same function for ``torch.compile``, and two small kernels re-stated from lesson 05
(a row softmax, a matmul with a fused epilogue) for the profilers and for "where fusion stops".

A lesson never imports another lesson: lesson 05's kernels are re-stated here in their simplest form.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from gpucourse.tiles import grouped_tile, tile_dot

MAX_ROW = 16384


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _rmsnorm_residual_kernel(x_ptr, r_ptr, w_ptr, out_ptr, res_ptr, n_rows, n_cols, sx, sr, so, sres, eps,
                             BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """ROWS rows per program; each row read once (x and residual), written twice (the sum, the normalised row)."""
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    for i in tl.static_range(ROWS):
        row = tl.program_id(0) * ROWS + i
        if row < n_rows:
            x = tl.load(x_ptr + row * sx + cols, mask=cmask, other=0.0).to(tl.float32)
            r = tl.load(r_ptr + row * sr + cols, mask=cmask, other=0.0).to(tl.float32)
            s = (x + r).to(res_ptr.dtype.element_ty)  # the new residual, rounded as it is stored
            tl.store(res_ptr + row * sres + cols, s, mask=cmask)
            sf = s.to(tl.float32)
            ms = tl.sum(sf * sf, axis=0) / n_cols  # mean of squares, accumulated in fp32
            rstd = 1.0 / tl.sqrt(ms + eps)
            tl.store(out_ptr + row * so + cols, (sf * rstd * w).to(out_ptr.dtype.element_ty), mask=cmask)


def _config(n_cols: int, n_rows: int) -> tuple:
    """(BLOCK, ROWS per program, num_warps): a whole row in registers, several short rows per program."""
    block = triton.next_power_of_2(max(n_cols, 1))
    warps = 4 if block <= 1024 else 8 if block <= 4096 else 16
    rows = 1 if block >= 2048 or _interpret() else 2
    return block, rows, warps


def fused_rmsnorm_residual(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    """``new_residual = x + residual``; ``out = new_residual / sqrt(mean(new_residual**2) + eps) * weight``, over the
    last dimension, in one launch. Reads x and residual once and writes out and new_residual once: 4 bytes moved per
    element per byte of dtype (plus the weight)."""
    return _launch(x, residual, weight, eps, _rmsnorm_residual_kernel)


def _launch(x, residual, weight, eps, kernel):
    """Allocate the outputs and launch ``kernel`` (the Triton kernel, or the same wrapped for torch.compile by
    :func:`rmsnorm_residual_op`) over the rows."""
    n_cols = x.shape[-1]
    assert n_cols <= MAX_ROW, f"rows up to {MAX_ROW} elements"
    x2, r2 = x.reshape(-1, n_cols), residual.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if r2.stride(-1) != 1:
        r2 = r2.contiguous()
    w = weight.contiguous()
    n_rows = x2.shape[0]
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    new_res = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows:
        block, rows, warps = _config(n_cols, n_rows)
        kernel[(triton.cdiv(n_rows, rows),)](
            x2, r2, w, out, new_res, n_rows, n_cols, x2.stride(0), r2.stride(0), out.stride(0), new_res.stride(0),
            eps, BLOCK=block, ROWS=rows, num_warps=warps)
    if x.dim() == 2:
        return out, new_res
    return out.view(x.shape), new_res.view(x.shape)


_OP = {}


def rmsnorm_residual_op():
    """The fused kernel as a PyTorch operator, ``torch.ops.gpucourse09.rmsnorm_residual(x, residual, weight, eps)``,
    made with ``torch.library.triton_op`` (registered on first use). An operator of this kind is one torch.compile
    can see into: dynamo puts it in the graph as one call (no graph break), and inductor, which the wrapper lets see
    the Triton kernel inside (``torch.library.wrap_triton``), calls that kernel from its generated code as it calls
    its own, fusing what comes before and after it into kernels of its own."""
    if "op" not in _OP:
        from torch.library import triton_op, wrap_triton

        @triton_op("gpucourse09::rmsnorm_residual", mutates_args=())
        def rmsnorm_residual(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                             eps: float) -> tuple[torch.Tensor, torch.Tensor]:
            return _launch(x, residual, weight, eps, wrap_triton(_rmsnorm_residual_kernel))

        _OP["op"] = rmsnorm_residual
    return _OP["op"]


def rmsnorm_residual_torch(x, residual, weight, eps: float = 1e-6):
    """The same function in torch: what ``torch.compile`` is given. Eagerly it is five kernels and four round trips
    through memory (add, square+mean, rsqrt, two multiplies)."""
    s = x + residual
    sf = s.float()
    out = sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return out.to(x.dtype), s


def moved_bytes(x, residual, weight, eps=None) -> int:
    """What one call must move: read x and residual, write out and new_residual (and read the weight once)."""
    return 4 * x.numel() * x.element_size() + weight.numel() * weight.element_size()


# ---------------------------------------------------------------------------------------------------------------------
# Re-stated from lesson 05 (a lesson never imports another): a row softmax and a matmul with a fused epilogue, on
# the kit's grouped-tile loop (gpucourse.tiles).


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, sx, so, BLOCK: tl.constexpr):
    """One program per row, the row in registers: read once, written once."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * so + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor, one Triton program per row."""
    rows, cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    _softmax_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), BLOCK=block,
                             num_warps=4 if block <= 2048 else 8 if block <= 8192 else 16)
    return out


@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))


@triton.jit
def _matmul_epilogue_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                            EPILOGUE: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = gelu(A @ B + bias) with the bias and GELU applied to the fp32 accumulator before the one store (the
    epilogue): the product never goes to memory unfinished."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tile_dot(a_ptr, b_ptr, rm, rn, M, N, K, sam, sak, sbk, sbn, BLOCK_M, BLOCK_N, BLOCK_K, UPCAST)
    if EPILOGUE:
        acc = _gelu(acc + tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :])
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_bias_gelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, epilogue: bool = True) -> torch.Tensor:
    """gelu(a @ b + bias) in one Triton kernel (``epilogue=False``: only a @ b, the unfused first half)."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    small = _interpret() or M * N < 2**20
    bm, bn, bk, warps, stages = (32, 32, 32, 4, 2) if small else (128, 128, 64, 8, 3)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _matmul_epilogue_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                  c.stride(0), c.stride(1), EPILOGUE=epilogue,
                                  UPCAST=_interpret() and a.dtype == torch.bfloat16, BLOCK_M=bm, BLOCK_N=bn,
                                  BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    return c


def bias_gelu_torch(a, b, bias):
    """The same in torch: a matmul (cuBLAS), then the bias add and GELU as separate passes over C."""
    return torch.nn.functional.gelu(a @ b + bias)
