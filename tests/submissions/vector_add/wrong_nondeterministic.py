"""Wrong: nudges one random element by one ulp on every call, so two calls on the same inputs differ
(the values stay within tolerance: only the determinism check catches it, as it would catch a race)."""
import random

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


@triton.jit
def nudge_kernel(out_ptr, i):
    bits = tl.load(out_ptr + i).to(tl.int32, bitcast=True)
    tl.store(out_ptr + i, (bits + 1).to(tl.float32, bitcast=True))  # the next float away from zero: one ulp


def vector_add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    nudge_kernel[(1,)](out, random.randrange(n))
    return out
