"""Wrong: no mask on the loads and stores, and the output from torch.empty_like(x) as Triton's tutorial writes it.
With a strided x (x = a[::2]) torch.empty_like gives a contiguous tensor the checker used not to guard: the unmasked
stores corrupted the heap and killed the Jupyter kernel in CPU mode. It must fail with a message instead."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


def vector_add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096)
    return out
