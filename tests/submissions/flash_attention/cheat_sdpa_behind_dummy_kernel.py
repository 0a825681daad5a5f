"""A cheat: SDPA computes the answer and a dummy Triton kernel is launched beside it, so that "a Triton kernel was
launched" holds."""
import torch
import triton
import triton.language as tl


@triton.jit
def dummy_kernel(X, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(X + offs, x, mask=offs < n)


def flash_attention(q, k, v, causal=False):
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    dummy_kernel[(1,)](out, min(out.numel(), 128), BLOCK=128)
    return out
