"""Crashed or error (GPU only): a Triton kernel stores through a wild pointer, an illegal memory access."""
import torch
import triton
import triton.language as tl


@triton.jit
def wild_store(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    far = offs.to(tl.int64) + (1 << 40)  # a terabyte past the output: unmapped on any GPU
    tl.store(out_ptr + far, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def vector_add(x, y):
    out = torch.empty_like(x)
    wild_store[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    return out
