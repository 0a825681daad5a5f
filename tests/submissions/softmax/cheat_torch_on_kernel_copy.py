"""Cheat: a Triton kernel copies x into a new buffer (a real launch that moves the data), then torch computes the
softmax from that copy with exp, amax, sum and div. What a kernel was given counts as derived from the inputs:
fails, naming the ops."""
import torch
import triton
import triton.language as tl


@triton.jit
def copy_rows(x_ptr, out_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + offs, mask=offs < cols)
    tl.store(out_ptr + row * cols + offs, v.to(tl.float32), mask=offs < cols)


def softmax(x):
    rows, cols = x.shape
    buf = torch.empty(rows, cols, dtype=torch.float32, device=x.device)
    copy_rows[(rows,)](x, buf, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
    e = torch.exp(buf - buf.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
