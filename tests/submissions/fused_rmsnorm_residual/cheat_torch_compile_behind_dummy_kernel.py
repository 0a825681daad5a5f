"""Cheat: a dummy Triton launch in front of torch.compile of the torch function (the compiler's kernels, not the
learner's, compute the answer). Fails: torch computes on the inputs, or the answer does not come from the launched
kernel."""
import torch
import triton
import triton.language as tl


@triton.jit
def nothing(x_ptr, n, BLOCK: tl.constexpr):
    pass


def _torch(x, residual, weight, eps):
    s = x + residual
    sf = s.float()
    return (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype), s


_compiled = torch.compile(_torch, dynamic=True)


def fused_rmsnorm_residual(x, residual, weight, eps):
    nothing[(1,)](x, x.numel(), BLOCK=128)
    return _compiled(x, residual, weight, eps)
