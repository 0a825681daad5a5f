"""Cheat (issue 17): a dummy Triton launch in front of torch.softmax. Fails: a torch op used on the input."""
import torch
import triton
import triton.language as tl


@triton.jit
def nothing(x_ptr, n, BLOCK: tl.constexpr):
    pass


def softmax(x):
    nothing[(1,)](x, x.numel(), BLOCK=128)
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
