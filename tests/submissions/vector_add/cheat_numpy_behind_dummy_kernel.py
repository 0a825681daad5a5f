"""Cheat: the sum computed in NumPy (which torch's dispatcher never sees: x.numpy() shares the memory), copied into
a torch.empty buffer, with a do-nothing Triton launch beside it. Fails: the output is right with the launch skipped."""
import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def nothing(out_ptr, n, BLOCK: tl.constexpr):
    pass


def vector_add(x, y):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    nothing[(1,)](out, x.numel(), BLOCK=128)
    s = np.add(x.cpu().numpy(), y.cpu().numpy())
    out.copy_(torch.from_numpy(s).to(out.device))
    return out
