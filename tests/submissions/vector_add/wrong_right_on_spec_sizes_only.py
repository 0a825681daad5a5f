"""Wrong (issue 17): right only for the sizes the spec used to list (1, 1023, 1025, 3001, 777, 2**17 + 3 and the GPU's
2**22 + 3), zeros elsewhere. Sizes are now drawn fresh for every run from each case's class: only n=1 passes."""
import torch
import triton
import triton.language as tl

KNOWN = {1, 1023, 1025, 3001, 777, 2**17 + 3, 2**22 + 3}


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vector_add(x, y):
    x, y = x.contiguous(), y.contiguous()
    n = x.numel()
    out = torch.zeros_like(x)
    if n in KNOWN:
        add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    else:
        add_kernel[(1,)](x, y, out, 0, BLOCK=256)  # a launch, so "no kernel launched" is not what fails it
    return out
