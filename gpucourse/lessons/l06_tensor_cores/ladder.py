"""Lesson 06's matmul rates: the dtype ladder against the datasheet peaks, and the SM clock and power under
a sustained matmul load (with the peak at the measured clock). The measuring functions raise GPURequiredError in
CPU mode; :func:`format_load` is pure Python."""
from __future__ import annotations

import torch

from gpucourse import device, dtypes, specs
from gpucourse.timing import interleaved, settle

from . import precision
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
