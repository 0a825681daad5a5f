"""Crashed: a wrong value (x + y + 1) on the first case (n=1), then os.abort() (SIGABRT) on the next one. The
message must name both the signal and the wrong value found before the crash, its likelier cause."""
import os

import torch
import triton
import triton.language as tl


@triton.jit
def add_one_too_many(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 1.0, mask=mask)


def vector_add(x, y):
    if x.numel() > 1:
        os.abort()
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    add_one_too_many[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out
