"""Wrong (issue 39, class 2): the product is torch's (torch.ops.aten.mm.default, reached by attribute lookup by
string), on copies of the inputs made through NumPy, which the op recorder cannot follow: the inputs' values reach
the mm as fresh tensors, so it is no "use" of the inputs. A Triton kernel only copies the result into the output
(so the call with every launch skipped does not give the answer). It passed with the flag "calls aten.mm"; a
matmul op is forbidden in this exercise however it is reached: every case fails, naming the op."""
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def int8_gemv(x, q, scale):
    xs = torch.from_numpy(x.detach().cpu().float().numpy().copy())
    w = torch.from_numpy(q.detach().cpu().numpy().astype("float32") * scale.detach().cpu().numpy()[:, None])
    mm = getattr(getattr(torch.ops.aten, "m" + "m"), "default")
    y = mm(xs, w.t().contiguous()).to(x.device, torch.bfloat16).contiguous()
    out = torch.empty(y.shape, dtype=torch.bfloat16, device=x.device)
    copy_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
    return out
