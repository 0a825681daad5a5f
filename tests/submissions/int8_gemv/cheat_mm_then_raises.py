"""Cheat: a Triton kernel dequantizes, torch multiplies, and the function then refuses shapes it was not written
for (K not a multiple of 1024), as a cuBLAS call does on shapes it cannot take: the forbidden call is the verdict on
every case, the raise is told beside it (on the GPU, torch._scaled_mm behind fp8_matmul raised on a 48x40 case and
the cheat was reported only as an error)."""
import torch
import triton
import triton.language as tl


@triton.jit
def dequant_kernel(q_ptr, s_ptr, w_ptr, K, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    q = tl.load(q_ptr + offs, mask=mask, other=0)
    s = tl.load(s_ptr + offs // K, mask=mask, other=0.0)
    tl.store(w_ptr + offs, q.to(tl.float32) * s, mask=mask)


def int8_gemv(x, q, scale):
    q = q.contiguous()
    n, k = q.shape
    w = torch.empty(n, k, dtype=torch.float32, device=q.device)
    dequant_kernel[(triton.cdiv(n * k, 1024),)](q, scale, w, k, n * k, BLOCK=1024)
    out = (x.float() @ w.T).to(x.dtype)
    if k % 1024:
        raise ValueError(f"K={k}: this path wants K a multiple of 1024")
    return out
