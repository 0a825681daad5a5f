"""A target for Nsight Compute (lesson 09): one workload, run once after a warm-up, so that ``ncu`` sees its kernels
inside the NVTX range "measured".

Usage: ``ncu ... python -m gpucourse.lessons.l09_compile_profiling.ncu_target
{sin_chain_compiled,sin_chain_eager,softmax,rmsnorm}``"""
import sys

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch

from gpucourse.lessons.l09_compile_profiling import kernels
from gpucourse.lessons.l09_compile_profiling.compiled import sin_chain
from gpucourse.lessons.l09_compile_profiling.modes import low_dtype

TARGETS = ("sin_chain_compiled", "sin_chain_eager", "softmax", "rmsnorm")


def main(argv: list | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in TARGETS:
        print(f"usage: python -m gpucourse.lessons.l09_compile_profiling.ncu_target {{{','.join(TARGETS)}}}",
              file=sys.stderr)
        return 2
    what = args[0]
    low = low_dtype(say=False).torch  # bf16 (fp16 on a GPU without bf16 tensor cores)
    if what.startswith("sin_chain"):
        x = torch.randn(2**26, device="cuda")
        fn = torch.compile(sin_chain) if what.endswith("compiled") else sin_chain
        fn(x)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("measured")
        fn(x)
    elif what == "softmax":
        x = torch.randn(8192, 8192, device="cuda", dtype=low)
        kernels.softmax(x)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("measured")
        kernels.softmax(x)
    else:
        x, r = (torch.randn(8192, 8192, device="cuda", dtype=low) for _ in range(2))
        w = torch.randn(8192, device="cuda", dtype=low)
        kernels.fused_rmsnorm_residual(x, r, w, 1e-6)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("measured")
        kernels.fused_rmsnorm_residual(x, r, w, 1e-6)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
