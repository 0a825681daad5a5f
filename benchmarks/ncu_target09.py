#!/usr/bin/env python3
"""A target for Nsight Compute (lesson 09): one workload, run once after a warm-up, so that `ncu` sees its kernels.
Usage: ncu ... python benchmarks/ncu_target09.py {sin_chain_compiled,sin_chain_eager,softmax,rmsnorm}"""
import sys

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch

from gpucourse.lessons.l09_compile_profiling import kernels, measure


def main() -> int:
    what = sys.argv[1]
    if what.startswith("sin_chain"):
        x = torch.randn(2**26, device="cuda")
        fn = torch.compile(measure.sin_chain) if what.endswith("compiled") else measure.sin_chain
        fn(x)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("measured")
        fn(x)
    elif what == "softmax":
        x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        kernels.softmax(x)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("measured")
        kernels.softmax(x)
    elif what == "rmsnorm":
        x, r = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w = torch.randn(8192, device="cuda", dtype=torch.bfloat16)
        kernels.fused_rmsnorm_residual(x, r, w, 1e-6)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("measured")
        kernels.fused_rmsnorm_residual(x, r, w, 1e-6)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
