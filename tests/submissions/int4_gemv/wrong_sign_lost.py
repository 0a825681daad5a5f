"""Wrong: the nibbles are masked with 0xF and never sign-extended: every negative weight (0b1000..0b1111)
is read as 8..15."""
import torch
import triton
import triton.language as tl


@triton.jit
def w4_kernel(x_ptr, p_ptr, s_ptr, out_ptr, N, K, stride_xm, stride_pn, stride_sn, stride_om,
              GROUP: tl.constexpr, BLOCK_N: tl.constexpr):
    HALF: tl.constexpr = GROUP // 2
    m = tl.program_id(0)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rj = tl.arange(0, HALF)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for g in range(0, K // GROUP):
        byte = g * HALF + rj
        b = tl.load(p_ptr + rn[:, None] * stride_pn + byte[None, :], mask=rn[:, None] < N, other=0).to(tl.int32)
        lo = (b & 0xF).to(tl.float32)
        hi = ((b >> 4) & 0xF).to(tl.float32)
        xe = tl.load(x_ptr + m * stride_xm + 2 * byte).to(tl.float32)
        xo = tl.load(x_ptr + m * stride_xm + 2 * byte + 1).to(tl.float32)
        part = tl.sum(lo * xe[None, :] + hi * xo[None, :], axis=1)
        acc += part * tl.load(s_ptr + rn * stride_sn + g, mask=rn < N, other=0.0)
    tl.store(out_ptr + m * stride_om + rn, acc.to(tl.bfloat16), mask=rn < N)


def int4_gemv(x, packed, scales, group_size):
    x, packed, scales = x.contiguous(), packed.contiguous(), scales.contiguous()
    (m, k), n = x.shape, packed.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    w4_kernel[(m, triton.cdiv(n, 32))](x, packed, scales, out, n, k, x.stride(0),
                                       packed.stride(0), scales.stride(0), out.stride(0),
                                       GROUP=group_size, BLOCK_N=32)
    return out
