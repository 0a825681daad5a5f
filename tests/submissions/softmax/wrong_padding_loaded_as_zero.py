"""Wrong: loads the masked-off lanes past the end of the row as 0 instead of -inf, so each of them adds exp(0 - max)
to the row's sum: every element of a row narrower than its power-of-two block is too small by one factor."""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, x_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_stride + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty),
             mask=cols < n_cols)


def softmax(x):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.stride(1) != 1:
        x = x.contiguous()
    softmax_kernel[(x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0),
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
