#!/usr/bin/env python3
"""Scratch (issue #4): which change to the lesson's matmul kernel closes the gap to cuBLAS for the fused epilogue?

Variants, all timed interleaved with cuBLAS and torch's unfused matmul + bias + silu (bf16 8192^3):
  v0  the kernel as it was (K mask on every step, autotune key M, N, K)
  v1  EVEN_K: no K mask when K is a multiple of BLOCK_K (a heuristic), ACTIVATION in the autotune key
  v2  v1 with a wider config list
On the H100 (benchmarks/results/h100-explore-matmul.json) v1 made the fused epilogue ~4% faster and the workbook's
kernel adopted it. Prints one JSON line per variant and writes $OUT/explore_matmul.json when OUT is set.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpucourse  # noqa: E402,F401
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gpucourse.timing import bench, settle  # noqa: E402


def configs(wide):
    base = [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 8),
            (128, 64, 64, 4, 4), (64, 64, 32, 4, 4)]
    if wide:
        base += [(256, 128, 64, 4, 8), (128, 128, 128, 3, 8), (128, 256, 32, 4, 8), (128, 256, 64, 3, 4),
                 (256, 128, 64, 3, 4), (128, 128, 64, 5, 4)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
            for bm, bn, bk, s, w in base]


def make(wide, even_k=True):
    @triton.autotune(configs=configs(wide), key=["M", "N", "K", "ACTIVATION"] if even_k else ["M", "N", "K"])
    @triton.heuristics({"EVEN_K": lambda args: even_k and args["K"] % args["BLOCK_K"] == 0})
    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
               stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, ACTIVATION: tl.constexpr, EVEN_K: tl.constexpr):
        pid = tl.program_id(0)
        grid_m, grid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
        group = pid // (GROUP_M * grid_n)
        first_m = group * GROUP_M
        group_rows = min(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % (GROUP_M * grid_n)) % group_rows
        pid_n = (pid % (GROUP_M * grid_n)) // group_rows
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
        a_ptrs = a_ptr + ram[:, None] * stride_am + rk[None, :] * stride_ak
        b_ptrs = b_ptr + rk[:, None] * stride_bk + rbn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                k_left = K - k * BLOCK_K
                a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        if ACTIVATION != "none":
            acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
            if ACTIVATION == "silu":
                acc = acc * tl.sigmoid(acc)
        c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    def matmul(a, b, bias=None, activation="none"):
        M, K = a.shape
        _, N = b.shape
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
        kernel[grid](a, b, c, bias if bias is not None else c, M, N, K, a.stride(0), a.stride(1),
                     b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     ACTIVATION=activation if bias is not None else "none")
        return c, kernel
    return matmul


def interleaved(fns, rounds=5, **decl):
    runs = {n: [] for n in fns}
    for _ in range(rounds):
        for n, f in fns.items():
            runs[n].append(bench(f, rep_ms=200, **decl).median_ms)
    return {n: statistics.median(v) for n, v in runs.items()}


def main():
    variants = {"v0": make(False, even_k=False), "v1": make(False), "v2": make(True)}
    out = []
    for k in (8192, 2048):
        m = n = 8192
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        ref = F.silu(torch.matmul(a, b) + bias)
        settle(lambda: torch.matmul(a, b))
        for name, mm in variants.items():
            def call(*args):
                r = mm(*args)
                return r[0] if isinstance(r, tuple) else r
            got = call(a, b, bias, "silu")
            torch.testing.assert_close(got, ref, rtol=2e-2, atol=0.5)
            call(a, b)
            t = interleaved({"plain": lambda: call(a, b), "fused": lambda: call(a, b, bias, "silu"),
                             "cublas": lambda: torch.matmul(a, b),
                             "unfused": lambda: F.silu(torch.matmul(a, b) + bias)})
            rec = {"variant": name, "K": k, **{f"{x}_ms": round(y, 4) for x, y in t.items()},
                   "plain_vs_cublas": round(t["cublas"] / t["plain"], 3),
                   "fused_speedup": round(t["unfused"] / t["fused"], 3)}
            r = mm(a, b, bias, "silu")
            if isinstance(r, tuple) and getattr(r[1], "best_config", None) is not None:
                rec["best_config"] = str(r[1].best_config)
            print(json.dumps(rec), flush=True)
            out.append(rec)
        del a, b, ref
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "explore_matmul.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
