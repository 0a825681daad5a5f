"""Wrong: the block is fixed at 1024 columns (the width the learner tested with): wider rows are cut short."""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, x_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_stride + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty),
             mask=cols < n_cols)


def softmax(x):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    softmax_kernel[(x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0), BLOCK=1024)
    return out
