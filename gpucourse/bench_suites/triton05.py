"""Lesson 05: the workbook's Triton kernels against torch and the copy ceiling (vector add, softmax, matmul).

The kernels are loaded from ``solutions/05_triton.ipynb`` (the one place they live). Every ratio is measured within
one run: our kernel, its peer and the ceiling, timed the same way by ``gpucourse.timing.bench``. The lesson's final
plots are drawn from what these functions return.
"""
from __future__ import annotations

import functools
import statistics

from ..benchmarks import register, target
from ..timing import bench, copy_gbps, settle


@functools.lru_cache(maxsize=1)
def solutions() -> dict:
    from ..solutions import load_solutions

    return load_solutions("05_triton")


def _interleaved(fns: dict, rounds: int = 3, **decl) -> dict:
    """Median over ``rounds`` of each fn's bench() median, taken in turns so clock drift hits all alike."""
    runs = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            runs[name].append(bench(fn, name=name, **decl))
    out = {}
    for name, rs in runs.items():
        ms = statistics.median(r.median_ms for r in rs)
        best = min(rs, key=lambda r: abs(r.median_ms - ms))
        out[name] = {"ms": ms, "gbps": best.gbps, "tflops": best.tflops, "warnings": best.warnings}
    return out


@register("triton05_vector_add", lesson="05")
def vector_add_bench() -> dict:
    import torch

    vector_add = solutions()["vector_add"]
    n = 2**28  # 1 GiB per fp32 vector
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    torch.testing.assert_close(vector_add(x, y), x + y, rtol=0, atol=0)
    big = _interleaved({"triton": lambda: vector_add(x, y), "torch": lambda: x + y}, bytes=3 * n * 4)
    copy = copy_gbps(n * 4)
    del x, y
    sizes = [2**k for k in range(12, 29, 2)]
    series = {"triton": [], "torch": []}
    for s in sizes:
        a, b = torch.randn(s, device="cuda"), torch.randn(s, device="cuda")
        series["triton"].append(bench(vector_add, a, b, bytes=3 * s * 4).gbps)
        series["torch"].append(bench(torch.add, a, b, bytes=3 * s * 4).gbps)
    ratio = big["triton"]["gbps"] / copy
    return {"n": n, "triton_gbps": big["triton"]["gbps"], "torch_gbps": big["torch"]["gbps"], "copy_gbps": copy,
            "sweep": {"sizes": sizes, "gbps": series},
            "targets": [target("vector add / copy bandwidth (fp32, 2^28)", ratio, 0.95)]}


@register("triton05_softmax", lesson="05")
def softmax_bench() -> dict:
    import torch

    softmax = solutions()["softmax"]
    rows = cols = 8192
    figures = {}
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))
        nbytes = 2 * x.numel() * x.element_size()
        r = _interleaved({"triton": lambda: softmax(x), "torch": lambda: torch.softmax(x, dim=-1)}, bytes=nbytes)
        name = str(dtype).replace("torch.", "")
        figures[name] = {"triton_gbps": r["triton"]["gbps"], "torch_gbps": r["torch"]["gbps"],
                         "copy_gbps": copy_gbps(x.numel() * x.element_size())}
        del x
    widths = [2**k for k in range(8, 15)]
    sweep = {}
    for dtype in (torch.float32, torch.float16):
        name = str(dtype).replace("torch.", "")
        sweep[name] = {"triton": [], "torch": []}
        for w in widths:
            x = torch.randn(4096, w, device="cuda", dtype=dtype)
            nbytes = 2 * x.numel() * x.element_size()
            sweep[name]["triton"].append(bench(softmax, x, bytes=nbytes).gbps)
            sweep[name]["torch"].append(bench(torch.softmax, x, -1, bytes=nbytes).gbps)
    f32, f16 = figures["float32"], figures["float16"]
    return {"shape": [rows, cols], **figures, "sweep": {"rows": 4096, "widths": widths, "gbps": sweep},
            "targets": [
                target("softmax fp32 8192x8192 / copy bandwidth", f32["triton_gbps"] / f32["copy_gbps"], 0.85),
                target("softmax fp16 8192x8192 / copy bandwidth", f16["triton_gbps"] / f16["copy_gbps"], 0.85),
                target("softmax fp32 / torch.softmax", f32["triton_gbps"] / f32["torch_gbps"], 1.4),
                target("softmax fp16 / torch.softmax", f16["triton_gbps"] / f16["torch_gbps"], 2.5),
            ]}


@register("triton05_matmul", lesson="05")
def matmul_bench() -> dict:
    import torch
    import torch.nn.functional as F

    matmul = solutions()["matmul"]
    m = n = k = 8192
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(matmul(a[:512], b), torch.matmul(a[:512], b), rtol=2e-2, atol=1.0)
    settle(lambda: torch.matmul(a, b))  # compute-bound: reach steady clocks before timing
    mm = _interleaved({"triton": lambda: matmul(a, b), "cuBLAS": lambda: torch.matmul(a, b)},
                      flops=2 * m * n * k, dtype=torch.bfloat16)
    fused = _interleaved({"triton fused": lambda: matmul(a, b, bias, "silu"),
                          "torch unfused": lambda: F.silu(torch.matmul(a, b) + bias)},
                         flops=2 * m * n * k, dtype=torch.bfloat16)
    torch.testing.assert_close(matmul(a[:256], b, bias, "silu"), F.silu(torch.matmul(a[:256], b) + bias),
                               rtol=2e-2, atol=0.5)
    # The same fusion where the matmul is shorter (K = 2048, an MLP-like shape): the epilogue's share grows.
    a2, b2 = a[:, :2048].contiguous(), b[:2048].contiguous()
    short = _interleaved({"triton fused": lambda: matmul(a2, b2, bias, "silu"),
                          "torch unfused": lambda: F.silu(torch.matmul(a2, b2) + bias)},
                         flops=2 * m * n * 2048, dtype=torch.bfloat16)
    del a, b, a2, b2
    sizes = [512, 1024, 2048, 3072, 4096, 6144, 8192]
    sweep = {"triton": [], "cuBLAS": []}
    for s in sizes:
        x = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        sweep["triton"].append(bench(matmul, x, y, flops=2 * s**3, dtype=torch.bfloat16).tflops)
        sweep["cuBLAS"].append(bench(torch.matmul, x, y, flops=2 * s**3, dtype=torch.bfloat16).tflops)
    return {"shape": [m, n, k], "dtype": "bfloat16",
            "triton_tflops": mm["triton"]["tflops"], "cublas_tflops": mm["cuBLAS"]["tflops"],
            "fused_ms": fused["triton fused"]["ms"], "unfused_ms": fused["torch unfused"]["ms"],
            "fused_k2048_ms": short["triton fused"]["ms"], "unfused_k2048_ms": short["torch unfused"]["ms"],
            "sweep": {"sizes": sizes, "tflops": sweep},
            "targets": [
                target("matmul bf16 8192^3 / cuBLAS", mm["triton"]["tflops"] / mm["cuBLAS"]["tflops"], 0.90),
                target("fused matmul+bias+silu / torch unfused (bf16 8192^3)",
                       fused["torch unfused"]["ms"] / fused["triton fused"]["ms"], 1.1),
            ]}
