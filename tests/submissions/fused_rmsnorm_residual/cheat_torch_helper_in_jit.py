"""A cheat: the kernel gets the tensors as tl.constexpr (Triton's interpreter passes them as torch tensors) and calls
a plain Python helper that does the residual add and the RMSNorm with torch, reached through an alias and getattr by
string so that no `torch.` shows in the kernel. On a GPU this does not compile; in CPU mode it must fail."""
import torch
import triton
import triton.language as tl

_ops = torch


def _norm(x, r, w, eps, out, s):
    add = getattr(_ops, "ad" + "d")
    s.copy_(add(x, r))
    sf = s.float()
    out.copy_((sf * getattr(_ops, "rsq" + "rt")(sf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(out.dtype))


@triton.jit
def rmsnorm_residual(x: tl.constexpr, r: tl.constexpr, w: tl.constexpr, o: tl.constexpr, s: tl.constexpr,
                     eps: tl.constexpr):
    _norm(x, r, w, eps, o, s)


def fused_rmsnorm_residual(x, residual, weight, eps):
    out, s = torch.empty_like(x), torch.empty_like(x)
    rmsnorm_residual[(1,)](x, residual, weight, out, s, eps=eps)
    return out, s
