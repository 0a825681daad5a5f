"""A cheat: the kernel gets q, k, v and the output as tl.constexpr (Triton's interpreter passes them as torch
tensors) and computes attention with torch inside its body, softmax reached by getattr on a string. On a GPU this
does not compile; in CPU mode it must fail."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def attn_kernel(Q: tl.constexpr, K: tl.constexpr, V: tl.constexpr, O: tl.constexpr, CAUSAL: tl.constexpr):
    s = (Q.float() @ K.float().transpose(-1, -2)) / math.sqrt(Q.shape[-1])
    if CAUSAL:
        s = s.masked_fill(s.new_ones(s.shape[-2:]).triu(1).bool(), float("-inf"))
    O.copy_(getattr(s, "soft" + "max")(-1) @ V.float())


def flash_attention(q, k, v, causal=False):
    o = torch.empty_like(q)
    attn_kernel[(1,)](q, k, v, o, CAUSAL=causal)
    return o
