"""Correct, but prints megabytes to stdout and stderr and raises warnings on every call."""
import sys
import warnings

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)

print("loading... " * 100_000)


def vector_add(x, y):
    print("debug: " + "x" * 400_000)
    sys.stderr.write("progress " * 50_000 + "\n")
    warnings.warn("this is a noisy submission")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    print(out)
    return out
