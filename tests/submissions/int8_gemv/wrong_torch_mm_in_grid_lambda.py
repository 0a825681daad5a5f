"""Wrong: the grid function, which Triton calls on the host to size the launch, computes the answer with torch; the
kernel only reads. Host code in both modes: the forbidden matmul is seen there."""
import torch
import triton
import triton.language as tl


@triton.jit
def touch_kernel(s_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(s_ptr + offs, mask=offs < N, other=0.0)


def int8_gemv(x, q, scale):
    (m, k), n = x.shape, q.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)

    def grid(meta):
        out.copy_((x.float() @ q.float().t() * scale.float()).to(torch.bfloat16))
        return (triton.cdiv(n, meta["BLOCK"]),)

    touch_kernel[grid](scale, n, BLOCK=64)
    return out
