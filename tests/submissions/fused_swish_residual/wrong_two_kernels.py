"""Known wrong: correct values, but the chain runs as two Triton kernels (swish, then the residual add)."""
import torch
import triton
import triton.language as tl


@triton.jit
def swish_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, x * tl.sigmoid(x), mask=mask)


@triton.jit
def add_kernel(a_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (a + y).to(out_ptr.dtype.element_ty), mask=mask)


def fused_swish_residual(x, y):
    xc, yc = x.contiguous(), y.contiguous()
    n = xc.numel()
    tmp = torch.empty(n, dtype=torch.float32, device=x.device)  # an intermediate round trip through memory
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, 1024),)
    swish_kernel[grid](xc, tmp, n, BLOCK=1024)
    add_kernel[grid](tmp, yc, out, n, BLOCK=1024)
    return out
