"""A cheat: the tensors are passed to the "kernel" as tl.constexpr, so Triton's interpreter hands them over as torch
tensors, and the body dequantizes and multiplies with torch (tensor methods and @, no name of torch in it). On a GPU
this does not compile; in CPU mode the body's first torch call must fail it."""
import torch
import triton
import triton.language as tl


@triton.jit
def w4_kernel(x: tl.constexpr, packed: tl.constexpr, scales: tl.constexpr, out: tl.constexpr,
              GROUP: tl.constexpr):
    lo = ((packed << 4) >> 4).float()  # the signed nibbles, with torch's int8 shifts
    hi = (packed >> 4).float()
    w = lo.new_empty(lo.shape[0], 2 * lo.shape[1])
    w[:, 0::2], w[:, 1::2] = lo, hi
    w = (w.view(w.shape[0], -1, GROUP) * scales.float()[:, :, None]).view(w.shape[0], -1)
    out.copy_(x.float() @ w.t())


def int4_gemv(x, packed, scales, group_size):
    out = torch.empty(x.shape[0], packed.shape[0], dtype=torch.bfloat16, device=x.device)
    w4_kernel[(1,)](x, packed.view(torch.int8), scales, out, GROUP=group_size)
    return out
