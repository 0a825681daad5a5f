"""The CUDA-core roof: what an SM's fp32 units do per second, and what a transcendental such as ``sin`` costs there.

Elementwise kernels never touch the tensor cores: their arithmetic runs on the CUDA cores, whose fp32 rate (67
TFLOP/s on an H100 SXM's datasheet, an FMA counted as two flops) is some 15 times below the bf16 tensor-core rate. So
an elementwise op is judged against that roof, and its work is counted in *instructions*, not in the flops a formula
suggests: one fp32 instruction issues per lane per clock, whether it is an FMA (two flops), an add, a max, or one
step of the dozen-odd instructions a ``sin`` compiles to.

:func:`fma_chain` runs a long chain of fused multiply-adds per element (the CUDA-core ceiling: compute only, its
memory traffic is negligible); :func:`sin_chain` applies ``sin`` ``k`` times per element. Timing both on the same
elements gives what one ``sin`` costs in FMA issue slots (:func:`slots_per_sin`), measured rather than assumed.
"""
from __future__ import annotations

import triton
import triton.language as tl

FMA_UNROLL = 8  # FMAs per loop iteration per element in _fma_kernel


@triton.jit
def _fma_kernel(x_ptr, out_ptr, n, iters, a, b, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    for _ in range(iters):  # a runtime loop of 8 dependent FMAs: the compiler cannot fold it away
        x = x * a + b
        x = x * a + b
        x = x * a + b
        x = x * a + b
        x = x * a + b
        x = x * a + b
        x = x * a + b
        x = x * a + b
    tl.store(out_ptr + offs, x, mask=mask)


@triton.jit
def _sin_kernel(x_ptr, out_ptr, n, k, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    for _ in range(k):
        x = tl.sin(x)
    tl.store(out_ptr + offs, x, mask=mask)


def fma_chain(x, iters: int, a: float = 0.999, b: float = 0.001, BLOCK: int = 1024):
    """``iters * 8`` FMAs ``x = x * a + b`` per element of float32 ``x``: ``2 * 8 * iters * x.numel()`` flops."""
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    _fma_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, iters, a, b, BLOCK=BLOCK, num_warps=4)
    return out


def fma_flops(n: int, iters: int) -> float:
    return 2.0 * FMA_UNROLL * iters * n


def sin_chain(x, k: int, BLOCK: int = 1024):
    """``sin`` applied ``k`` times to each element of float32 ``x`` (Triton's ``tl.sin``), in one kernel."""
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    _sin_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, k, BLOCK=BLOCK, num_warps=4)
    return out


def slots_per_sin(sin_ms: float, k: int, fma_ms: float, iters: int) -> float:
    """FMA issue slots one ``sin`` takes: (time per sin) / (time per FMA), both over the same elements."""
    return (sin_ms / k) / (fma_ms / (FMA_UNROLL * iters))
