"""Cheat (issue 17): a dummy Triton launch in front of the torch chain (sigmoid, mul, add). Fails: torch ops used on
the inputs."""
import torch
import triton
import triton.language as tl


@triton.jit
def nothing(x_ptr, n, BLOCK: tl.constexpr):
    pass


def fused_swish_residual(x, y):
    nothing[(1,)](x, x.numel(), BLOCK=128)
    xf = x.float()
    return (xf * torch.sigmoid(xf) + y.float()).to(x.dtype)
