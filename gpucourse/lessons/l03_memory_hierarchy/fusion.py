"""Fusion: chains of memory-bound operations, run op by op (eager torch) or as one kernel (Triton).

Each eager op reads its inputs from device memory and writes its output back, so a chain of k elementwise ops moves
about k times the bytes one fused kernel does. :func:`traffic` gives the bytes each way; the fused kernels here are
the lesson's examples (``sin`` four times, LayerNorm -> ReLU -> add). The exercise's chain, ``x * sigmoid(x) + y``,
has its eager form here and its Triton form in the solved workbook (``solutions/03_memory_hierarchy.ipynb``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


def sin4_eager(x):
    """Four ``torch.sin`` in a row: four kernels, each reading and writing the whole tensor."""
    for _ in range(4):
        x = torch.sin(x)
    return x


def ln_relu_add_eager(x, w, b, r, eps: float = 1e-5):
    """``relu(layer_norm(x)) + r`` over the last dimension: three kernels (layer_norm, relu, add)."""
    return torch.relu(torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)) + r


def swish_residual_eager(x, y):
    """``x * sigmoid(x) + y``: three kernels (sigmoid, mul, add)."""
    return x * torch.sigmoid(x) + y


@triton.jit
def _sin4_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    x = tl.sin(tl.sin(tl.sin(tl.sin(x))))  # four sines on a value held in registers: no memory traffic between
    tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty), mask=mask)


def sin4_triton(x, BLOCK: int = 1024):
    """``sin`` four times in one Triton kernel: read once, write once."""
    xc = x.contiguous()
    out = torch.empty_like(xc)
    n = xc.numel()
    _sin4_kernel[(triton.cdiv(n, BLOCK),)](xc, out, n, BLOCK=BLOCK)
    return out.view(x.shape)


@triton.jit
def _ln_relu_add_kernel(x_ptr, w_ptr, b_ptr, r_ptr, out_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / cols
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.maximum(d / tl.sqrt(var + eps) * w + b, 0.0) + r
    tl.store(out_ptr + row * cols + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def ln_relu_add_triton(x, w, b, r, eps: float = 1e-5):
    """``relu(layer_norm(x)) + r`` in one Triton kernel, one program per row (rows of up to 16384 elements)."""
    cols = x.shape[-1]
    if cols > 16384:
        raise ValueError("this teaching kernel holds a whole row in one block: at most 16384 columns")
    xc, rc = x.contiguous(), r.contiguous()
    out = torch.empty_like(xc)
    rows = xc.numel() // cols
    block = triton.next_power_of_2(cols)
    _ln_relu_add_kernel[(rows,)](xc, w.contiguous(), b.contiguous(), rc, out, cols, eps, BLOCK=block,
                                 num_warps=min(16, max(4, block // 256)))
    return out


# Reads + writes of whole tensors, per element, for each chain: eager runs one kernel per op, fused runs one.
_PASSES = {
    "sin4": {"eager": 8, "fused": 2},  # 4 x (read + write) vs read + write
    "ln_relu_add": {"eager": 7, "fused": 3},  # layer_norm 2, relu 2, add 3  vs  read x, read r, write
    "swish_residual": {"eager": 8, "fused": 3},  # sigmoid 2, mul 3, add 3  vs  read x, read y, write
}


def traffic(chain: str, numel: int, elem_bytes: int) -> dict:
    """Bytes moved through device memory by the eager and the fused version of ``chain`` (weights not counted)."""
    if chain not in _PASSES:
        raise ValueError(f"chain must be one of {sorted(_PASSES)}, not {chain!r}")
    return {k: v * numel * elem_bytes for k, v in _PASSES[chain].items()}
