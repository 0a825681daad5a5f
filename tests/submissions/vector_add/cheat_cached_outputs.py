"""Cheat: computes once, then returns the cached answer (resized) on every later call."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)

_cache = {}


def vector_add(x, y):
    if "out" not in _cache:
        xc, yc = x.contiguous(), y.contiguous()
        out = torch.empty_like(xc)
        add_kernel[(triton.cdiv(x.numel(), 1024),)](xc, yc, out, x.numel(), BLOCK=1024)
        _cache["out"] = out
    cached = _cache["out"]
    n = x.numel()
    return cached.repeat(n // cached.numel() + 1)[:n].clone()
