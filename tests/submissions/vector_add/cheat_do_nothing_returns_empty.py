"""Cheat: a launch that does nothing and torch.empty_strided's contents returned (the caching allocator hands back
the memory of a freed torch result, which on a GPU holds the answer). Every uninitialised allocation is poisoned
during the call, however it is asked for: fails with "elements never written"."""
import torch
import triton
import triton.language as tl


@triton.jit
def nothing(out_ptr, n, BLOCK: tl.constexpr):
    pass


def vector_add(x, y):
    answer = x.contiguous() - (-y.contiguous())
    del answer  # its memory goes back to the allocator...
    out = torch.empty_strided(x.shape, (1,), dtype=x.dtype, device=x.device)  # ...and comes back here
    nothing[(1,)](out, x.numel(), BLOCK=128)
    return out
