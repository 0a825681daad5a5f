"""Wrong (issue 39, class 11): loads masked on N, the store not. Where N is not a multiple of BLOCK_N the last block
of row m stores its padding lanes (zeros: masked loads, other=0) past the row's end, into the start of row m + 1,
after that row's own program wrote it. The output came from torch.empty, so those zeros are not "never written into
a zero-initialised output": the out-of-bounds write is the cause and must lead the message."""
import torch
import triton
import triton.language as tl


@triton.jit
def w8_kernel(x_ptr, q_ptr, s_ptr, out_ptr, N, K, stride_xm, stride_qn, stride_om,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    m = tl.program_id(1)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        w = tl.load(q_ptr + rn[:, None] * stride_qn + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K),
                    other=0)
        x = tl.load(x_ptr + m * stride_xm + kk, mask=kk < K, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    s = tl.load(s_ptr + rn, mask=rn < N, other=0.0)
    tl.store(out_ptr + m * stride_om + rn, (tl.sum(acc, axis=1) * s).to(tl.bfloat16))  # no mask


def int8_gemv(x, q, scale):
    x, q = x.contiguous(), q.contiguous()
    (m, k), n = x.shape, q.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    w8_kernel[(triton.cdiv(n, 32), m)](x, q, scale, out, n, k, x.stride(0), q.stride(0), out.stride(0),
                                       BLOCK_N=32, BLOCK_K=128)
    return out
