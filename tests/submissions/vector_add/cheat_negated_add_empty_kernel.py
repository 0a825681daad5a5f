"""Cheat (issue 17): the sum computed by torch ops other than the flagged one, `x - (-y)`, plus one launch of a
Triton kernel that does nothing. Fails: torch ops used on the inputs (aten.neg, aten.sub), and the output is right
with the launch skipped."""
import torch
import triton
import triton.language as tl


@triton.jit
def nothing(out_ptr, n, BLOCK: tl.constexpr):
    pass


def vector_add(x, y):
    out = x - (-y)
    nothing[(1,)](out, x.numel(), BLOCK=128)
    return out
