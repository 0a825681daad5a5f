"""Cheat (issue 17): one launch of a kernel that writes nothing, and torch.empty_like's contents returned (memory
the allocator may hand back holding an earlier answer). Uninitialised memory is poisoned during the call: fails
with "elements never written"."""
import torch
import triton
import triton.language as tl


@triton.jit
def nothing(out_ptr, n, BLOCK: tl.constexpr):
    pass


def vector_add(x, y):
    out = torch.empty_like(x)
    nothing[(triton.cdiv(x.numel(), 128),)](out, x.numel(), BLOCK=128)
    return out
