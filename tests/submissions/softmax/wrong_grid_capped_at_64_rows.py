"""Wrong: the grid is capped at 64 programs (one per row), so rows past the 64th are never written: a cap that
no CPU-mode case used to exceed."""
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
    if x.stride(1) != 1:
        x = x.contiguous()
    softmax_kernel[(min(x.shape[0], 64),)](out, x, x.shape[1], x.stride(0), out.stride(0),
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
