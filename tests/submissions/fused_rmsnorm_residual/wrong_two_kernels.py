"""Known wrong: right values, but two launches: the residual add in one kernel (its sum stored), the norm in a second
that reads the sum back from memory (a round trip the fused kernel avoids)."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, r_ptr, s_ptr, n, sx, sr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(x_ptr + row * sx + cols, mask=m, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * sr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(s_ptr + row * n + cols, (x + r).to(s_ptr.dtype.element_ty), mask=m)


@triton.jit
def rmsnorm_kernel(s_ptr, w_ptr, o_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    sf = tl.load(s_ptr + row * n + cols, mask=m, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(sf * sf, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(o_ptr + row * n + cols, (sf * rstd * w).to(o_ptr.dtype.element_ty), mask=m)


def fused_rmsnorm_residual(x, residual, weight, eps):
    n = x.shape[-1]
    x2, r2 = x.reshape(-1, n), residual.reshape(-1, n)
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    s = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(n)
    add_kernel[(x2.shape[0],)](x2, r2, s, n, x2.stride(0), r2.stride(0), BLOCK=block)
    rmsnorm_kernel[(x2.shape[0],)](s, weight, out, n, eps, BLOCK=block)
    return out.view(x.shape), s.view(x.shape)
