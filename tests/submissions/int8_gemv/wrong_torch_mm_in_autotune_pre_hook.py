"""Wrong: the answer is computed by torch in a Config's pre_hook, which Triton runs on the host before the launch;
the kernel itself does nothing useful. Host code either way (CPU mode or GPU): the forbidden matmul is seen there."""
import torch
import triton
import triton.language as tl


def _answer(nargs):
    x, q, s, out = nargs["x_ptr"], nargs["q_ptr"], nargs["s_ptr"], nargs["out_ptr"]
    out.copy_((x.float() @ q.float().t() * s.float()).to(torch.bfloat16))


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, pre_hook=_answer)], key=["N"])
@triton.jit
def touch_kernel(x_ptr, q_ptr, s_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(s_ptr + offs, mask=offs < N, other=0.0)


def int8_gemv(x, q, scale):
    (m, k), n = x.shape, q.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    touch_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, q, scale, out, n)
    return out
