"""Wrong: divides by (x + y) - (x + y) somewhere, producing NaN in a few elements."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    s = x + y
    bad = (s - s) / (s - s)  # 0/0 = NaN
    tl.store(out_ptr + offs, tl.where(offs % 100 == 0, bad, s), mask=mask)


def vector_add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
