"""Lesson 06's GPU measurements: the dtype ladder, alignment, the fixed-tile N sweep beside cuBLAS, FP8 against
``torch._scaled_mm``. Every function times through :mod:`gpucourse.timing` and returns plain dicts (the notebook
plots them and the benchmarks in ``bench.py`` record them). GPU only: each raises GPURequiredError in CPU mode.
"""
from __future__ import annotations

import torch

from gpucourse import device, dtypes, specs
from gpucourse.progress import progress
from gpucourse.timing import bench, interleaved, settle

from . import kernels, precision, waves
from .precision import tf32


def peak(dtype: str) -> float | None:
    """This GPU's datasheet TFLOP/s for ``dtype`` (None when it is not in ``gpucourse.specs`` or has no such path)."""
    spec = specs.current()
    return spec.peak_tflops(dtype) if spec else None


def dtype_ladder(n: int = 8192, rounds: int = 3, rep_ms: float = 200) -> dict:
    """TFLOP/s of an n³ matmul in each dtype this GPU runs on tensor cores (and fp32 on CUDA cores), next to the
    datasheet peak. FP8 through ``torch._scaled_mm``: per-tensor scales, row-wise scales, and per-tensor with fast
    accumulation. Returns ``{"n", "tflops": {name: TFLOP/s}, "peak": {name: TFLOP/s or None}, "skipped": {name:
    why}}``."""
    device.require_gpu("The dtype ladder")
    dev = "cuda"
    x = torch.randn(n, n, device=dev)
    y = torch.randn(n, n, device=dev)
    fns, peaks, skipped = {}, {}, {}

    def fp32():
        with tf32(False):
            return x @ y

    def tf32_mm():
        with tf32(True):
            return x @ y

    fns["fp32"], peaks["fp32"] = fp32, "fp32"
    if device.has_tf32():
        fns["tf32"], peaks["tf32"] = tf32_mm, "tf32"
    else:
        skipped["tf32"] = "no TF32 tensor cores before Ampere (compute capability 8.0)"
    x16, y16 = x.half(), y.half()
    fns["fp16"], peaks["fp16"] = (lambda: x16 @ y16), "fp16"
    if device.has_bf16():
        xb, yb = x.bfloat16(), y.bfloat16()
        fns["bf16"], peaks["bf16"] = (lambda: xb @ yb), "bf16"
    else:
        skipped["bf16"] = "no bf16 tensor cores before Ampere (compute capability 8.0)"
    if device.has_fp8():
        qa, sa = precision.fp8_quantize(x)
        qb, sb = precision.fp8_quantize(y.t().contiguous())  # b column-major: cuBLAS's FP8 layout
        qb = qb.t()
        ra, rsa = precision.fp8_quantize(x, rowwise=True)
        rb, rsb = precision.fp8_quantize(y.t().contiguous(), rowwise=True)
        rb, rsb = rb.t(), rsb.reshape(1, -1)
        bf = torch.bfloat16
        fns["fp8 per-tensor"] = lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf)
        fns["fp8 row-wise"] = lambda: torch._scaled_mm(ra, rb, scale_a=rsa, scale_b=rsb, out_dtype=bf)
        fns["fp8 fast accum"] = lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf,
                                                         use_fast_accum=True)
        for k in ("fp8 per-tensor", "fp8 row-wise", "fp8 fast accum"):
            peaks[k] = "fp8"
    else:
        skipped["fp8"] = "no FP8 tensor cores before Ada/Hopper (compute capability 8.9)"
    settle(fns.get("bf16", fns["fp16"]), seconds=1.0)
    runs = interleaved(fns, rounds=rounds, flops=2 * n**3, rep_ms=rep_ms)
    return {"n": n, "tflops": {k: r.typical.tflops for k, r in runs.items()},
            "peak": {k: peak(v) for k, v in peaks.items()}, "skipped": skipped}


low_dtype = dtypes.tensor_core_16bit  # bf16, or fp16 on a T4 (saying so): the alignment and wave sweeps


def alignment(m: int = 8192, n: int = 8192, ks=(8184, 8190, 8191, 8192, 8193, 8200), dtype=None,
              rep_ms: float = 100) -> dict:
    """cuBLAS TFLOP/s of (m×k) @ (k×n) for each k, and for the unaligned ones the same product with k zero-padded
    to the next multiple of 8 (padding done inside the timed call, so its cost counts). Useful flops (2·m·n·k).
    ``dtype``: default bf16 (fp16 on a T4: :func:`low_dtype`)."""
    device.require_gpu("The alignment sweep")
    dtype = dtype or low_dtype().torch
    out = {"m": m, "n": n, "dtype": dtypes.torch_name(dtype), "k": [], "tflops": [], "padded_tflops": []}
    big_a = torch.randn(m, max(ks) + 8, device="cuda", dtype=dtype)
    big_b = torch.randn(max(ks) + 8, n, device="cuda", dtype=dtype)
    for k in progress(ks, "alignment sweep"):
        a = big_a[:, :k].contiguous()
        b = big_b[:k].contiguous()
        flops = 2 * m * n * k
        out["k"].append(k)
        out["tflops"].append(bench(torch.matmul, a, b, flops=flops, dtype=dtype, rep_ms=rep_ms).tflops)
        if k % 8:
            kp = -(-k // 8) * 8

            def padded(a=a, b=b, kp=kp):
                return torch.nn.functional.pad(a, (0, kp - a.shape[1])) @ \
                    torch.nn.functional.pad(b, (0, 0, 0, kp - b.shape[0]))

            out["padded_tflops"].append(bench(padded, flops=flops, dtype=dtype, rep_ms=rep_ms).tflops)
        else:
            out["padded_tflops"].append(None)
    return out


def wave_sweep(m: int = 8192, k: int = 8192, ns=range(1024, 4097, 64), rep_ms: float = 50,
               dtype=None) -> dict:
    """Time the fixed-tile Triton kernel (:data:`kernels.WAVE_TILE`) and cuBLAS at every N, M = K fixed. Returns
    ``{"m", "k", "tile", "num_sms", "n": [...], "triton_ms": [...], "cublas_ms": [...]}``."""
    device.require_gpu("The wave sweep")
    dtype = dtype or low_dtype().torch  # bf16; fp16 on a T4
    ns = list(ns)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    big_b = torch.randn(k, max(ns), device="cuda", dtype=dtype)
    tri, cub = [], []
    settle(lambda: torch.matmul(a, big_b), seconds=1.0)
    for n in progress(ns, "wave sweep"):
        b = big_b[:, :n].contiguous()
        flops = 2 * m * n * k
        tri.append(bench(kernels.fixed_tile_matmul, a, b, flops=flops, dtype=dtype, rep_ms=rep_ms).median_ms)
        cub.append(bench(torch.matmul, a, b, flops=flops, dtype=dtype, rep_ms=rep_ms).median_ms)
    t = kernels.WAVE_TILE
    return {"m": m, "k": k, "tile": [t["BLOCK_M"], t["BLOCK_N"]], "num_sms": device.props().sm_count, "n": ns,
            "triton_ms": tri, "cublas_ms": cub}


def compare_with_model(sweep: dict, jump: float | None = None) -> dict:
    """The wave model against a measured sweep (:func:`wave_sweep`'s result; pure Python, works on recorded data).

    At every tile-column boundary of the sweep (N crossing a multiple of tile_n) the measured time ratio after/before
    is compared with the model's (full waves after/before). A measured *jump* is a ratio above ``jump`` (default:
    halfway between 1 and the smallest wave step the model predicts in the sweep). Returns the boundaries with both
    ratios, the model's predicted step positions, the measured ones, how many agree, and the model's time error
    (fitted: one tile's time from the median of measured/waves)."""
    m, tile_m, tile_n, sms = sweep["m"], sweep["tile"][0], sweep["tile"][1], sweep["num_sms"]
    ns, ms = sweep["n"], sweep["triton_ms"]
    full = [waves.full_waves(m, n, tile_m, tile_n, sms) for n in ns]
    rows = []
    for i in range(1, len(ns)):
        if -(-ns[i] // tile_n) != -(-ns[i - 1] // tile_n):  # a new column of tiles starts here
            rows.append({"n": ns[i], "measured_ratio": ms[i] / ms[i - 1], "model_ratio": full[i] / full[i - 1]})
    steps = [r["model_ratio"] for r in rows if r["model_ratio"] > 1]
    if jump is None:
        jump = 1 + (min(steps) - 1) / 2 if steps else 1.05
    for r in rows:
        r["measured_jump"] = r["measured_ratio"] > jump
        r["model_jump"] = r["model_ratio"] > 1
    per_wave = sorted(t / w for t, w in zip(ms, full))
    wave_ms = per_wave[len(per_wave) // 2]
    predicted = [w * wave_ms for w in full]
    err = [abs(p - t) / t for p, t in zip(predicted, ms)]
    return {"jump_threshold": jump, "boundaries": rows,
            "model_steps": [r["n"] for r in rows if r["model_jump"]],
            "measured_steps": [r["n"] for r in rows if r["measured_jump"]],
            "agree": sum(r["model_jump"] == r["measured_jump"] for r in rows), "of": len(rows),
            "wave_ms": wave_ms, "predicted_ms": predicted, "median_abs_error": sorted(err)[len(err) // 2],
            "max_abs_error": max(err)}


class FP8Table(dict):
    """``fp8_versus_scaled_mm``'s result: a dict that prints as a table."""

    def __str__(self) -> str:
        cols = ["yours", "yours, b row-major", "_scaled_mm", "_scaled_mm row-wise", "_scaled_mm fast accum"]
        lines = [f"{'shape':<18}" + "".join(f"{c:>23}" for c in cols) + f"{'yours / _scaled_mm':>20}"]
        for shape, r in self.items():
            cells = "".join(f"{r['tflops'].get(c, float('nan')):>23,.0f}" for c in cols)
            lines.append(f"{'x'.join(map(str, shape)):<18}{cells}{r['ratio']:>20.2f}")
        return "TFLOP/s (median of interleaved rounds)\n" + "\n".join(lines)


def fp8_versus_scaled_mm(fp8_matmul, sizes=((4096, 4096, 4096), (8192, 8192, 8192)), rounds: int = 3,
                         rep_ms: float = 200) -> FP8Table:
    """Your ``fp8_matmul(a, b, scale_a, scale_b)`` against ``torch._scaled_mm`` (per-tensor, row-wise, fast
    accumulation) on the same FP8 operands, b column-major (K contiguous, as cuBLAS wants) and, for yours, also
    row-major. Checked against ``_scaled_mm`` first (bf16 tolerance). Needs FP8 tensor cores."""
    device.require_gpu("Timing FP8 matmuls")
    if not device.has_fp8():
        raise RuntimeError("this GPU has no FP8 tensor cores (compute capability 8.9+ needed)")
    bf = torch.bfloat16
    out = FP8Table()
    for m, n, k in progress(sizes, "fp8 against _scaled_mm"):
        x = torch.randn(m, k, device="cuda")
        y = torch.randn(n, k, device="cuda")  # y is b transposed: b = y.t() is K-contiguous
        qa, sa = precision.fp8_quantize(x)
        qy, sb = precision.fp8_quantize(y)
        qb = qy.t()
        qb_rows = qb.contiguous()
        ra, rsa = precision.fp8_quantize(x, rowwise=True)
        ry, rsb = precision.fp8_quantize(y, rowwise=True)
        want = torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf)
        torch.testing.assert_close(fp8_matmul(qa, qb, sa, sb), want, rtol=8e-3, atol=4e-3 * want.abs().max().item())
        torch.testing.assert_close(fp8_matmul(qa, qb_rows, sa, sb), want, rtol=8e-3,
                                   atol=4e-3 * want.abs().max().item())
        fns = {"yours": lambda: fp8_matmul(qa, qb, sa, sb),
               "yours, b row-major": lambda: fp8_matmul(qa, qb_rows, sa, sb),
               "_scaled_mm": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf),
               "_scaled_mm row-wise": lambda: torch._scaled_mm(ra, ry.t(), scale_a=rsa, scale_b=rsb.reshape(1, -1),
                                                               out_dtype=bf),
               "_scaled_mm fast accum": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf,
                                                                 use_fast_accum=True)}
        for fn in fns.values():
            fn()  # compile and autotune before timing
        settle(fns["_scaled_mm"], seconds=1.0)
        runs = interleaved(fns, rounds=rounds, flops=2 * m * n * k, dtype="fp8", rep_ms=rep_ms)
        tfl = {name: r.typical.tflops for name, r in runs.items()}
        out[(m, n, k)] = {"tflops": tfl, "ms": {name: r.median_ms for name, r in runs.items()},
                          "ratio": runs["_scaled_mm"].median_ms / runs["yours"].median_ms,
                          "ratio_fast_accum": runs["_scaled_mm fast accum"].median_ms / runs["yours"].median_ms}
    return out


def fp8_accuracy(fp8_matmul, m: int = 2048, n: int = 2048, ks=(1024, 8192, 32768)) -> dict:
    """Relative error (normwise) against the float64 product of the same FP8 values, for yours and
    ``torch._scaled_mm`` with and without fast accumulation, as K grows: where reduced-precision accumulation
    shows."""
    device.require_gpu("FP8 accuracy")
    bf = torch.bfloat16
    out = {"m": m, "n": n, "k": list(ks), "yours": [], "_scaled_mm": [], "_scaled_mm fast accum": []}
    for k in progress(ks, "fp8 accuracy"):
        x = torch.randn(m, k, device="cuda")
        y = torch.randn(n, k, device="cuda")
        qa, sa = precision.fp8_quantize(x)
        qy, sb = precision.fp8_quantize(y)
        ref = (qa.double() * sa.double()) @ (qy.double() * sb.double()).t()
        for name, c in (("yours", fp8_matmul(qa, qy.t(), sa, sb)),
                        ("_scaled_mm", torch._scaled_mm(qa, qy.t(), scale_a=sa, scale_b=sb, out_dtype=bf)),
                        ("_scaled_mm fast accum", torch._scaled_mm(qa, qy.t(), scale_a=sa, scale_b=sb, out_dtype=bf,
                                                                   use_fast_accum=True))):
            out[name].append(precision.rel_error(c, ref))
    return out
