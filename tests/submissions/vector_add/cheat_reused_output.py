"""Cheat (or a careless speed-up): one output buffer kept between calls and returned every time. The checker's
second call on the same inputs then overwrites the first call's answer, so a racy kernel could never show two
different answers; it must fail for reusing the memory."""
import torch
import triton
import triton.language as tl

_OUT = {}


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vector_add(x, y):
    x, y = x.contiguous(), y.contiguous()
    n = x.numel()
    key = (n, x.device)
    if key not in _OUT:
        _OUT[key] = torch.empty_like(x)
    out = _OUT[key]
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
