"""Lesson 06's GPU measurements: the dtype ladder, the SM clock and power under load, alignment (rates and the
kernels cuBLAS picks), the fixed-tile N sweep beside cuBLAS, FP8 against ``torch._scaled_mm`` like for like. Every
timing goes through :mod:`gpucourse.timing` and returns plain dicts (the notebook prints them and the benchmarks in
``bench.py`` record them); the measuring functions raise GPURequiredError in CPU mode. The helpers that read their
results (``alignment_summary``, ``row_alignment``, ``kernel_family``, ``format_*``, ``round_ratios``,
``accuracy_rows``, ``compare_with_model``) are pure Python and also run on recorded results.
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
              rounds: int = 5, rep_ms: float = 100) -> dict:
    """cuBLAS TFLOP/s of (m×k) @ (k×n) for each k, and for the unaligned ones the same product with k zero-padded
    to the next multiple of 8 (padding done inside the timed call, so its cost counts). Useful flops (2·m·n·k).
    Every variant is timed in ``rounds`` interleaved rounds (:func:`gpucourse.timing.interleaved`), so clock drift
    hits them alike; ``tflops`` is the median over the rounds, ``tflops_range`` the lowest and highest round.
    ``dtype``: default bf16 (fp16 on a T4: :func:`low_dtype`)."""
    device.require_gpu("The alignment sweep")
    dtype = dtype or low_dtype().torch
    ks = list(ks)
    big_a = torch.randn(m, max(ks) + 8, device="cuda", dtype=dtype)
    big_b = torch.randn(max(ks) + 8, n, device="cuda", dtype=dtype)
    fns = {}
    for k in ks:
        a = big_a[:, :k].contiguous()
        b = big_b[:k].contiguous()
        fns[f"K={k}"] = lambda a=a, b=b: torch.matmul(a, b)
        if k % 8:
            kp = -(-k // 8) * 8

            def padded(a=a, b=b, kp=kp):
                return torch.nn.functional.pad(a, (0, kp - a.shape[1])) @ \
                    torch.nn.functional.pad(b, (0, 0, 0, kp - b.shape[0]))

            fns[f"K={k} padded"] = padded
    settle(fns[f"K={ks[0]}"], seconds=1.0)
    runs = interleaved(fns, rounds=rounds, rep_ms=rep_ms)

    def rate(name, k):
        r = runs.get(name)
        if r is None:
            return None, None
        t = [2 * m * n * k / ms / 1e9 for ms in r.medians_ms]
        return 2 * m * n * k / r.median_ms / 1e9, [min(t), max(t)]

    out = {"m": m, "n": n, "dtype": dtypes.torch_name(dtype), "rounds": rounds, "k": ks, "tflops": [],
           "tflops_range": [], "padded_tflops": [], "padded_range": []}
    for k in ks:
        t, spread = rate(f"K={k}", k)
        p, pspread = rate(f"K={k} padded", k)
        out["tflops"].append(t)
        out["tflops_range"].append(spread)
        out["padded_tflops"].append(p)
        out["padded_range"].append(pspread)
    return out


def row_alignment(k: int, elem_bytes: int = 2, widest: int = 16) -> int:
    """The widest aligned load (in elements, a power of two up to ``widest`` bytes) that a row of ``k`` elements of
    ``elem_bytes`` bytes allows when every row starts where the previous one ends: 8 for bf16 rows of 8192, 2 for
    8190 (4-byte loads), 1 for 8191 (2-byte loads). cuBLAS's pre-Hopper kernel names end in ``align<this>``."""
    for name, v in (("k", k), ("elem_bytes", elem_bytes), ("widest", widest)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    a = max(1, widest // elem_bytes)
    while a > 1 and k % a:
        a //= 2
    return a


def alignment_summary(al: dict) -> list:
    """For each unaligned K of :func:`alignment`'s result: its rate, and the padded one, as fractions of the rate at
    the padded K (the next multiple of 8) where the sweep measured it. Pure Python (works on recorded sweeps)."""
    rate = dict(zip(al["k"], al["tflops"]))
    rows = []
    for k, t, p in zip(al["k"], al["tflops"], al["padded_tflops"]):
        if k % 8 == 0:
            continue
        kp = -(-k // 8) * 8
        ref = rate.get(kp)
        rows.append({"k": k, "padded_k": kp, "tflops": t, "padded_tflops": p, "aligned_tflops": ref,
                     "unpadded_share": t / ref if ref else None,
                     "padded_share": p / ref if ref and p else None})
    return rows


_ARCH_TAGS = (("sm100", "Blackwell (sm100)"), ("sm90", "Hopper (sm90)"), ("sm80", "Ampere (sm80)"),
              ("sm75", "Turing (sm75)"), ("sm70", "Volta (sm70)"))


def kernel_family(name: str) -> dict:
    """What a cuBLAS/CUTLASS kernel name says about the kernel: the GPU generation it was written for (``nvjet_sm90``,
    ``cutlass_80`` = sm80 ...), the tensor-core instruction shape of CUTLASS's ``s16816``/``s1688`` names (mma.sync
    m16n8k16 / m16n8k8), and the ``alignN`` suffix (elements per load of A and B). Read from the name only."""
    import re

    low = name.lower()
    m = re.search(r"cutlass_?(\d{2,3})_", low) or re.search(r"sm_?(\d{2,3})", low)
    arch = None
    if m:
        tag = f"sm{m.group(1)}"
        arch = next((label for t, label in _ARCH_TAGS if t == tag), tag)
    elif "ampere" in low:
        arch = "Ampere (sm80)"
    elif "turing" in low:
        arch = "Turing (sm75)"
    mma = re.search(r"s(16816|1688|884)gemm", low)
    shapes = {"16816": "mma.sync m16n8k16", "1688": "mma.sync m16n8k8", "884": "mma.sync m8n8k4"}
    align = re.search(r"align(\d+)", low)
    return {"name": name, "arch": arch, "mma": shapes[mma.group(1)] if mma else None,
            "align": int(align.group(1)) if align else None}


def short_kernel_name(name: str) -> str:
    """A kernel name without the C++ wrapping the profiler shows around CUTLASS kernels:
    ``void cutlass::Kernel2<cutlass_80_..._align2>(cutlass_80_..._align2::Params)`` -> ``cutlass_80_..._align2``."""
    import re

    m = re.match(r"^void\s+[\w:]+<(\w+)>\(", name)
    return m.group(1) if m else name


def cublas_kernels(m: int = 8192, n: int = 8192, ks=(8192, 8190, 8191), dtype=None) -> dict:
    """The GPU kernels one ``torch.matmul`` of (m×K) @ (K×n) runs for each K, read from ``torch.profiler`` (after one
    untraced call, so cuBLAS's choice is made). Returns ``{"m", "n", "dtype", "kernels": {K: [(name, µs), ...]}}``,
    longest first; copies and memsets are left out."""
    from torch.profiler import ProfilerActivity, profile

    from gpucourse import timeline

    device.require_gpu("Reading cuBLAS's kernel names")
    dtype = dtype or low_dtype().torch
    out = {"m": m, "n": n, "dtype": dtypes.torch_name(dtype), "kernels": {}}
    for k in ks:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        torch.matmul(a, b)
        torch.cuda.synchronize()
        with timeline.quiet_profiler(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.matmul(a, b)
            torch.cuda.synchronize()
        found = {}
        for e in prof.events():
            if not str(getattr(e, "device_type", "")).endswith("CUDA"):
                continue
            if e.name.lower().startswith(("memcpy", "memset")):
                continue
            found[e.name] = found.get(e.name, 0.0) + e.time_range.elapsed_us()
        out["kernels"][k] = sorted(found.items(), key=lambda kv: -kv[1])
        del a, b
    return out


def _smi_fields(index_or_uuid: str) -> dict | None:
    """One reading of the SM clock, its maximum, power draw and limit from ``nvidia-smi`` (uncached), or None."""
    from gpucourse import nvidia_smi

    query = "--query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu"
    text = nvidia_smi.run.__wrapped__(query, "--format=csv,noheader,nounits", "-i", index_or_uuid)
    if not text or not text.strip():
        return None
    vals = [v.strip() for v in text.strip().splitlines()[0].split(",")]
    keys = ("sm_mhz", "max_sm_mhz", "power_w", "power_limit_w", "temp_c")
    out = {}
    for key, v in zip(keys, vals):
        try:
            out[key] = float(v)
        except ValueError:  # "[N/A]" on some boards
            out[key] = None
    return out if out.get("sm_mhz") else None


def _smi_id() -> str:
    """How nvidia-smi names the current CUDA device: its UUID where torch reports one (CUDA_VISIBLE_DEVICES may
    renumber devices), else its index."""
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = str(getattr(p, "uuid", "") or "")
    if uuid and _smi_fields("GPU-" + uuid.removeprefix("GPU-")):
        return "GPU-" + uuid.removeprefix("GPU-")
    return str(torch.cuda.current_device())


def clocks_under_load(n: int = 8192, seconds: float = 3.0, dtype=None, fill: str = "randn",
                      poll_s: float = 0.2) -> dict:
    """Run bf16 n³ matmuls back to back for ``seconds`` (after a one-second settle) while a thread reads the SM
    clock and the power draw from ``nvidia-smi`` every ``poll_s``; the matmuls' TFLOP/s over the same window from CUDA
    events. ``fill``: the operands' values, ``"randn"`` (normal random numbers) or ``"zeros"`` (the same work on
    zeros: the flops are the same, the switching activity, hence the power, is not). Returns ``{"n", "dtype", "fill",
    "tflops", "samples": [...], "sm_mhz" (median), "max_sm_mhz", "power_w" (median), "power_limit_w"}``, or with
    ``"error"`` where nvidia-smi gives no reading."""
    import statistics
    import threading
    import time

    if fill not in ("randn", "zeros"):
        raise ValueError(f"fill must be 'randn' or 'zeros', not {fill!r}")
    device.require_gpu("Reading clocks under load")
    dtype = dtype or low_dtype().torch
    make = torch.randn if fill == "randn" else torch.zeros
    a = make(n, n, device="cuda", dtype=dtype)
    b = make(n, n, device="cuda", dtype=dtype)
    settle(lambda: a @ b, seconds=1.0)
    ident = _smi_id()
    samples, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            row = _smi_fields(ident)
            if row:
                samples.append(row)
            stop.wait(poll_s)

    thread = threading.Thread(target=poll, daemon=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0
    thread.start()
    start.record()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(10):
            a @ b
        calls += 10
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    stop.set()
    thread.join(timeout=30)
    out = {"n": n, "dtype": dtypes.torch_name(dtype), "fill": fill, "calls": calls,
           "tflops": 2 * n**3 * calls / start.elapsed_time(end) / 1e9, "samples": samples}
    if not samples:
        out["error"] = "nvidia-smi gave no clock reading"
        return out

    def med(key):
        vals = [s[key] for s in samples if s.get(key) is not None]
        return statistics.median(vals) if vals else None

    out.update(sm_mhz=med("sm_mhz"), max_sm_mhz=med("max_sm_mhz"), power_w=med("power_w"),
               power_limit_w=med("power_limit_w"), temp_c=med("temp_c"))
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


def format_load(load: dict, spec_key: str | None = None, sms: int | None = None) -> str:
    """:func:`clocks_under_load`'s result as text: the rate, the clock and the power; with ``spec_key`` (a
    ``gpucourse.specs`` key that :mod:`peak` knows) also the peak at the measured clock and the rate's share of it
    and of the datasheet figure. Pure Python."""
    from gpucourse import specs

    from . import peak

    dt = dtypes.short(load["dtype"])
    head = f"{dt} {load['n']}³ matmuls on {load.get('fill', 'randn')}: {load['tflops']:,.0f} TFLOP/s"
    if "error" in load or load.get("sm_mhz") is None:
        return f"{head} ({load.get('error', 'no clock reading')})"

    def num(v, unit):
        return f"{v:,.0f} {unit}" if v is not None else "n/a"

    lines = [f"{head} at an SM clock of {num(load['sm_mhz'], 'MHz')} (median of {len(load['samples'])} readings; "
             f"the maximum is {num(load.get('max_sm_mhz'), 'MHz')}), drawing {num(load.get('power_w'), 'W')} of a "
             f"{num(load.get('power_limit_w'), 'W')} limit"]
    if spec_key in peak.RATES and dt in peak.RATES[spec_key].macs_per_clock_per_sm:
        at = peak.peak_at(spec_key, dt, load["sm_mhz"], sms=sms)
        sheet = specs.SPECS[spec_key].tflops[dt]
        lines.append(f"  peak at that clock: {sms or peak.RATES[spec_key].sms} SMs x {load['sm_mhz']:,.0f} MHz x "
                     f"{peak.RATES[spec_key].macs_per_clock_per_sm[dt]:,} MACs/clock/SM x 2 = {at:,.0f} TFLOP/s; "
                     f"the matmuls ran at {100 * load['tflops'] / at:.0f}% of it, {100 * load['tflops'] / sheet:.0f}% "
                     f"of the datasheet's {sheet:,g}")
    return "\n".join(lines)


# The four FP8 variants of the like-for-like comparison: each kernel in each accumulation mode.
FP8_PRECISE = ("fp8_matmul precise", "_scaled_mm precise")
FP8_FAST = ("fp8_matmul fast", "_scaled_mm fast")
FP8_ROW_MAJOR = "fp8_matmul fast, b row-major"


def _spread(values: list) -> list:
    return [min(values), max(values)]


def round_ratios(theirs_ms: list, mine_ms: list) -> tuple:
    """Speed of "mine" relative to "theirs" from interleaved rounds: each round's ratio of median times
    (theirs / mine, above 1 = mine faster), then (median of the rounds' ratios, [lowest, highest]). Pairing within a
    round keeps the two under the same clock; the range says how much a single round could have misled."""
    import statistics

    if len(theirs_ms) != len(mine_ms) or not theirs_ms:
        raise ValueError(f"need the same number (> 0) of rounds for both, got {len(theirs_ms)} and {len(mine_ms)}")
    per_round = [t / m for t, m in zip(theirs_ms, mine_ms)]
    return statistics.median(per_round), _spread(per_round)


def fp8_like_for_like(fp8_matmul, shapes=((8192, 8192, 8192),), rounds: int = 7, rep_ms: float = 100,
                      row_major_b: bool = True) -> dict:
    """The workbook's ``fp8_matmul(a, b, scale_a, scale_b, precise=...)`` against ``torch._scaled_mm`` in the same
    accumulation mode: precise (``precise=True`` against ``use_fast_accum=False``, both adding the tensor cores'
    partial sums into fp32 every so often) and fast (``precise=False`` against ``use_fast_accum=True``, neither
    does). Per-tensor scales, same FP8 operands, b column-major (K contiguous: the layout both want); with
    ``row_major_b`` also fp8_matmul fast on a row-major b (its transposing copy included in the time).

    All variants of a shape are timed in ``rounds`` interleaved rounds after a settle. Per shape: ``tflops`` (median
    of the rounds) and ``tflops_range`` (lowest and highest round) of each variant, and the ratios ``precise`` and
    ``fast`` (_scaled_mm's time / fp8_matmul's, so above 1 means fp8_matmul is faster): the median of the per-round
    ratios, with their range. Each variant is first checked against ``_scaled_mm`` precise (bf16's tolerance; three times
    looser for the fast modes)."""
    device.require_gpu("Timing FP8 matmuls")
    if not device.has_fp8():
        raise RuntimeError("this GPU has no FP8 tensor cores (compute capability 8.9+ needed)")
    bf = torch.bfloat16
    out = {"rounds": rounds, "rep_ms": rep_ms, "shapes": {}}
    for m, n, k in progress(shapes, "fp8 like for like"):
        x = torch.randn(m, k, device="cuda")
        y = torch.randn(n, k, device="cuda")  # b = y.t(): K contiguous, as torch._scaled_mm requires
        qa, sa = precision.fp8_quantize(x)
        qy, sb = precision.fp8_quantize(y)
        qb = qy.t()
        del x, y
        fns = {"fp8_matmul precise": lambda: fp8_matmul(qa, qb, sa, sb, precise=True),
               "_scaled_mm precise": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf),
               "fp8_matmul fast": lambda: fp8_matmul(qa, qb, sa, sb, precise=False),
               "_scaled_mm fast": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf,
                                                          use_fast_accum=True)}
        if row_major_b:
            qb_rows = qb.contiguous()
            fns[FP8_ROW_MAJOR] = lambda: fp8_matmul(qa, qb_rows, sa, sb, precise=False)
        want = fns["_scaled_mm precise"]()
        top = want.abs().max().item()
        # precise modes to bf16's tolerance; fast accumulation drifts further at large K (an H100 run had 1 element
        # of 67 million 1.3% off at 8192^3), so those are checked for computing the product, not for precision
        tight, loose = dict(rtol=8e-3, atol=4e-3 * top), dict(rtol=3e-2, atol=1e-2 * top)
        for name, fn in fns.items():  # also compiles and autotunes each variant before timing
            torch.testing.assert_close(fn(), want, **(tight if "precise" in name else loose),
                                       msg=lambda msg, name=name: f"{name}: {msg}")
        settle(fns["_scaled_mm precise"], seconds=1.0)
        runs = interleaved(fns, rounds=rounds, rep_ms=rep_ms)
        flops = 2 * m * n * k
        row = {"tflops": {}, "tflops_range": {}, "ms": {}}
        for name, r in runs.items():
            row["tflops"][name] = flops / r.median_ms / 1e9
            row["tflops_range"][name] = _spread([flops / t / 1e9 for t in r.medians_ms])
            row["ms"][name] = r.median_ms
        for mode, (mine, theirs) in (("precise", FP8_PRECISE), ("fast", FP8_FAST)):
            row[mode], row[f"{mode}_range"] = round_ratios(runs[theirs].medians_ms, runs[mine].medians_ms)
        if row_major_b:
            row["row_major_cost"] = runs[FP8_ROW_MAJOR].median_ms / runs["fp8_matmul fast"].median_ms
        out["shapes"]["x".join(map(str, (m, n, k)))] = row
    return out


def format_like_for_like(res: dict) -> str:
    """:func:`fp8_like_for_like`'s result as a table: TFLOP/s (median, and the rounds' range) and both ratios."""
    names = [*FP8_PRECISE, *FP8_FAST]
    lines = [f"TFLOP/s, median of {res['rounds']} interleaved rounds (lowest-highest round); ratio = "
             f"_scaled_mm's time / fp8_matmul's in the same mode, median of the rounds (range)",
             f"{'M x N x K':<18}" + "".join(f"{n:>22}" for n in names) + f"{'precise/precise':>22}{'fast/fast':>20}"]
    for shape, r in res["shapes"].items():
        cells = "".join(f"{r['tflops'][n]:>8,.0f} ({r['tflops_range'][n][0]:,.0f}-{r['tflops_range'][n][1]:,.0f})"
                        .rjust(22) for n in names)
        ratios = "".join(f"{r[m]:.3f} ({r[m + '_range'][0]:.2f}-{r[m + '_range'][1]:.2f})".rjust(w)
                         for m, w in (("precise", 22), ("fast", 20)))
        lines.append(f"{shape:<18}{cells}{ratios}")
    if any("row_major_cost" in r for r in res["shapes"].values()):
        lines.append("fp8_matmul fast with a row-major b (the transposing copy inside the call), time / with a "
                     "column-major b: " + ", ".join(f"{s} {r['row_major_cost']:.2f}x" for s, r in res["shapes"].items()
                                                    if "row_major_cost" in r))
    return "\n".join(lines)


def fp8_accuracy_modes(fp8_matmul, m: int = 2048, n: int = 2048, ks=(1024, 8192, 32768)) -> dict:
    """Relative error (normwise) against the float64 product of the same FP8 values as K grows, for fp8_matmul and
    ``torch._scaled_mm`` each in precise and fast accumulation: where the tensor cores' reduced-precision
    accumulation shows. Keys as :func:`accuracy_rows` names them."""
    device.require_gpu("FP8 accuracy")
    bf = torch.bfloat16
    out = {"m": m, "n": n, "k": list(ks), **{name: [] for name in ACCURACY_NAMES}}
    for k in progress(ks, "fp8 accuracy"):
        x = torch.randn(m, k, device="cuda")
        y = torch.randn(n, k, device="cuda")
        qa, sa = precision.fp8_quantize(x)
        qy, sb = precision.fp8_quantize(y)
        ref = (qa.double() * sa.double()) @ (qy.double() * sb.double()).t()
        got = {"fp8_matmul precise": fp8_matmul(qa, qy.t(), sa, sb, precise=True),
               "fp8_matmul fast": fp8_matmul(qa, qy.t(), sa, sb, precise=False),
               "_scaled_mm precise": torch._scaled_mm(qa, qy.t(), scale_a=sa, scale_b=sb, out_dtype=bf),
               "_scaled_mm fast": torch._scaled_mm(qa, qy.t(), scale_a=sa, scale_b=sb, out_dtype=bf,
                                                   use_fast_accum=True)}
        for name, c in got.items():
            out[name].append(precision.rel_error(c, ref))
    return out


ACCURACY_NAMES = ("fp8_matmul precise", "fp8_matmul fast", "_scaled_mm precise", "_scaled_mm fast")
# The names the recorded runs (benchmarks/explore_tensor_cores.py, second file) gave the same series: there "yours"
# was the workbook kernel with precise=True.
_RECORDED_NAMES = {"yours": "fp8_matmul precise", "yours, fast accumulation": "fp8_matmul fast",
                   "_scaled_mm": "_scaled_mm precise", "_scaled_mm fast accum": "_scaled_mm fast"}


def accuracy_rows(acc: dict) -> dict:
    """``{name: [error per K]}`` under :data:`ACCURACY_NAMES`, from :func:`fp8_accuracy_modes`'s result or from the
    recorded one (whose names differ); series a result lacks are left out."""
    rows = {}
    for name, values in acc.items():
        label = name if name in ACCURACY_NAMES else _RECORDED_NAMES.get(name)
        if label and isinstance(values, list):
            rows[label] = values
    return {name: rows[name] for name in ACCURACY_NAMES if name in rows}
