"""A cheat: the kernel loads the bytes with tl.load, then unpacks them with NumPy on the interpreter's array behind
the loaded tl tensor (`.handle.data`) and stores the result. Only Triton's interpreter has such an array: on a GPU
this does not compile; in CPU mode it must fail before it runs."""
import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def unpack_kernel(p_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    b = tl.load(p_ptr + offs, mask=mask, other=0)
    raw = b.handle.data.astype(np.int8)
    lo = tl.full((BLOCK,), 0, tl.int8)
    hi = tl.full((BLOCK,), 0, tl.int8)
    lo.handle.data = np.right_shift(np.left_shift(raw, 4), 4)
    hi.handle.data = np.right_shift(raw, 4)
    tl.store(out_ptr + 2 * offs, lo, mask=mask)
    tl.store(out_ptr + 2 * offs + 1, hi, mask=mask)


def unpack_int4(p):
    p = p.contiguous()
    out = torch.empty(p.shape[0], 2 * p.shape[1], dtype=torch.int8, device=p.device)
    unpack_kernel[(triton.cdiv(p.numel(), 1024),)](p.view(torch.int8), out, p.numel(), BLOCK=1024)
    return out
