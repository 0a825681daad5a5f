"""Lesson 05: the workbook's Triton kernels against torch and the copy ceiling (vector add, softmax, matmul).

The kernels are loaded from ``solutions/05_triton.ipynb`` (the one place they live). Every ratio is measured within
one run: our kernel, its peer and the ceiling, timed the same way by ``gpucourse.timing.bench``. The lesson's final
plots are drawn from what these functions return.
"""
from __future__ import annotations

from gpucourse import dtypes
from gpucourse.benchmarks import register, target
from gpucourse.timing import bench, copy_gbps, interleaved, settle


def solutions() -> dict:
    from gpucourse.solutions import cached_solutions
    from . import LESSON

    return cached_solutions(LESSON.notebook)


@register("triton05_vector_add")
def vector_add_bench() -> dict:
    import torch

    vector_add = solutions()["vector_add"]
    n = 2**28  # 1 GiB per fp32 vector
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    torch.testing.assert_close(vector_add(x, y), x + y, rtol=0, atol=0)
    big = interleaved({"triton": lambda: vector_add(x, y), "torch": lambda: x + y}, bytes=3 * n * 4)
    copy = copy_gbps(n * 4)
    del x, y
    sizes = [2**k for k in range(12, 29, 2)]
    series = {"triton": [], "torch": []}
    for s in sizes:
        a, b = torch.randn(s, device="cuda"), torch.randn(s, device="cuda")
        series["triton"].append(bench(vector_add, a, b, bytes=3 * s * 4).gbps)
        series["torch"].append(bench(torch.add, a, b, bytes=3 * s * 4).gbps)
    triton_gbps, torch_gbps = big["triton"].typical.gbps, big["torch"].typical.gbps
    return {"n": n, "triton_gbps": triton_gbps, "torch_gbps": torch_gbps, "copy_gbps": copy,
            "sweep": {"sizes": sizes, "gbps": series},
            "targets": [target("vector add / copy bandwidth (fp32, 2^28)", triton_gbps / copy, 0.95)]}


@register("triton05_softmax")
def softmax_bench() -> dict:
    import torch

    softmax = solutions()["softmax"]
    rows = cols = 8192
    figures = {}
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))
        nbytes = 2 * x.numel() * x.element_size()
        r = interleaved({"triton": lambda: softmax(x), "torch": lambda: torch.softmax(x, dim=-1)}, bytes=nbytes)
        name = dtypes.torch_name(dtype)
        figures[name] = {"triton_gbps": r["triton"].typical.gbps, "torch_gbps": r["torch"].typical.gbps,
                         "copy_gbps": copy_gbps(x.numel() * x.element_size())}
        del x
    widths = [2**k for k in range(8, 15)]
    sweep = {}
    for dtype in (torch.float32, torch.float16):
        name = dtypes.torch_name(dtype)
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


@register("triton05_matmul")
def matmul_bench() -> dict:
    """The workbook's matmul against cuBLAS, and the fused ``silu(a @ b + bias)`` against torch's unfused chain.

    On GPUs with tensor descriptors (compute capability 9.0+) the lesson's Hopper kernel
    (:mod:`gpucourse.lessons.l05_triton.hopper_matmul`) is timed beside the workbook's, and the fused-epilogue target is checked on it;
    elsewhere on the workbook's. Compute-bound timings wander with the clocks, so everything here is timed after
    :func:`settle`, in 300 ms windows, five rounds taken in turns (median of the rounds' medians).
    """
    import torch
    import torch.nn.functional as F

    from . import hopper_matmul

    matmul = solutions()["matmul"]
    m = n = k = 8192
    bf16 = dict(dtype=torch.bfloat16, rep_ms=300)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    hopper_missing = hopper_matmul.unsupported(a, b)
    kernels = {"triton": matmul, **({} if hopper_missing else {"triton hopper": hopper_matmul.matmul})}
    want = F.silu(torch.matmul(a[:512], b) + bias)
    for name, fn in kernels.items():
        torch.testing.assert_close(fn(a[:512], b), torch.matmul(a[:512], b), rtol=2e-2, atol=1.0)
        torch.testing.assert_close(fn(a[:512], b, bias, "silu"), want, rtol=2e-2, atol=1.0)
    # The same fusion where the matmul is shorter (K = 2048, an MLP-like shape): the epilogue's share grows.
    a2, b2 = a[:, :2048].contiguous(), b[:2048].contiguous()
    for fn in kernels.values():  # autotune every timed shape before the clocks are settled and timing starts
        fn(a, b), fn(a, b, bias, "silu"), fn(a2, b2, bias, "silu")
    settle(lambda: torch.matmul(a, b))  # compute-bound: reach steady clocks before timing

    def fused_vs_unfused(x, y):
        fns = {f"{name} fused": (lambda fn=fn: fn(x, y, bias, "silu")) for name, fn in kernels.items()}
        fns["torch unfused"] = lambda: F.silu(torch.matmul(x, y) + bias)
        return interleaved(fns, rounds=5, flops=2 * x.shape[0] * y.shape[1] * x.shape[1], **bf16)

    plain = {name: (lambda fn=fn: fn(a, b)) for name, fn in kernels.items()}
    mm = interleaved({**plain, "cuBLAS": lambda: torch.matmul(a, b)}, rounds=5, flops=2 * m * n * k, **bf16)
    fused = fused_vs_unfused(a, b)
    short = fused_vs_unfused(a2, b2)
    del a, b, a2, b2
    sizes = [512, 1024, 2048, 3072, 4096, 6144, 8192]
    sweep = {name: [] for name in [*kernels, "cuBLAS"]}
    for s in sizes:
        x = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        for name, fn in [*kernels.items(), ("cuBLAS", torch.matmul)]:
            sweep[name].append(bench(fn, x, y, flops=2 * s**3, dtype=torch.bfloat16).tflops)
    best = "triton hopper" if "triton hopper" in kernels else "triton"
    out = {"shape": [m, n, k], "dtype": "bfloat16", "timing": "settle, then 5 interleaved rounds of 300 ms",
           "hopper_kernel": None if hopper_missing else "gpucourse.lessons.l05_triton.hopper_matmul",
           "hopper_unavailable_because": hopper_missing,
           "tflops": {name: r.typical.tflops for name, r in mm.items()},
           "fused_ms": {name: r.median_ms for name, r in fused.items()},
           "fused_k2048_ms": {name: r.median_ms for name, r in short.items()},
           "sweep": {"sizes": sizes, "tflops": sweep}}
    targets = [target("matmul bf16 8192^3 / cuBLAS (workbook kernel)",
                      out["tflops"]["triton"] / out["tflops"]["cuBLAS"], 0.90)]
    if best != "triton":
        targets.append(target("matmul bf16 8192^3 / cuBLAS (Hopper kernel)",
                              out["tflops"][best] / out["tflops"]["cuBLAS"], 0.90))
    targets.append(target(f"fused matmul+bias+silu / torch unfused (bf16 8192^3, "
                          f"{'Hopper' if best != 'triton' else 'workbook'} kernel)",
                          out["fused_ms"]["torch unfused"] / out["fused_ms"][f"{best} fused"], 1.1))
    out["targets"] = targets
    return out
