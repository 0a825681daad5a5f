"""Wrong: a Triton kernel dequantizes the whole matrix to bfloat16 in memory, then torch multiplies: three times
the weight bytes of an int8 GEMV move (int8 read, bf16 written, bf16 read again), and each dequantized weight is
rounded to bfloat16 (8 significant bits), an error about half the int8 step."""
import torch
import triton
import triton.language as tl


@triton.jit
def dequant_kernel(q_ptr, s_ptr, w_ptr, K, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    q = tl.load(q_ptr + offs, mask=mask, other=0)
    s = tl.load(s_ptr + offs // K, mask=mask, other=0.0)
    tl.store(w_ptr + offs, (q.to(tl.float32) * s).to(tl.bfloat16), mask=mask)


def int8_gemv(x, q, scale):
    q = q.contiguous()
    n, k = q.shape
    w = torch.empty(n, k, dtype=torch.bfloat16, device=q.device)
    dequant_kernel[(triton.cdiv(n * k, 1024),)](q, scale, w, k, n * k, BLOCK=1024)
    return x @ w.T
