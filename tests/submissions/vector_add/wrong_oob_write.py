"""Wrong: correct output, but it also stores zeros just past the last element of y (an out-of-bounds write)."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, sx, sy, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * sx, mask=mask)
    y = tl.load(y_ptr + offs * sy, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
    tl.store(y_ptr + (offs + n) * sy, tl.zeros_like(y), mask=offs < 4)


def vector_add(x, y):
    n = x.numel()
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, x.stride(0), y.stride(0), BLOCK=1024)
    return out
