"""Cheat (issue 17): a dummy Triton launch in front of a torch matmul. Fails: a torch op used on the inputs."""
import torch
import triton
import triton.language as tl


@triton.jit
def nothing(a_ptr, n, BLOCK: tl.constexpr):
    pass


def matmul(a, b):
    nothing[(1,)](a, a.numel(), BLOCK=128)
    return (a.float() @ b.float()).to(a.dtype)
