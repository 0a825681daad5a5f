"""Wrong: masks each nibble with 0xF (a logical unpack): 0b1111 comes out as 15 instead of -1, every negative
weight becomes positive."""
import torch
import triton
import triton.language as tl


@triton.jit
def unpack_kernel(p_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    b = tl.load(p_ptr + offs, mask=mask, other=0).to(tl.int32)
    tl.store(out_ptr + 2 * offs, (b & 0xF).to(tl.int8), mask=mask)
    tl.store(out_ptr + 2 * offs + 1, ((b >> 4) & 0xF).to(tl.int8), mask=mask)


def unpack_int4(p):
    p = p.contiguous()
    out = torch.empty(p.shape[0], 2 * p.shape[1], dtype=torch.int8, device=p.device)
    unpack_kernel[(triton.cdiv(p.numel(), 1024),)](p, out, p.numel(), BLOCK=1024)
    return out
