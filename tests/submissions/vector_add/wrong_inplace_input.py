"""Wrong: writes the sum into x and returns x (modifies its input)."""
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


def vector_add(x, y):
    n = x.numel()
    if not x.is_contiguous():
        x, y = x.contiguous(), y.contiguous()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, x, n, BLOCK=1024)
    return x
