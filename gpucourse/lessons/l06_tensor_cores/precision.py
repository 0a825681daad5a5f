"""What each dtype does to a matmul's accuracy, against a float64 reference; runs in CPU mode (emulated) and on a GPU
(the real kernels beside the emulation).

Emulation: round the inputs to the dtype with ``.to()``, multiply exactly in float64, round the result to the output
dtype. That models the input and output rounding, which dominate; it does not model the order or precision of the
accumulation inside a real kernel, which the GPU measurement shows. TF32 has no torch dtype: its rounding (float32
with 10 mantissa bits) is emulated on the bits. FP8 inputs get a per-tensor scale first (amax -> the format's
largest value), as real FP8 matmuls do.
"""
from __future__ import annotations

import contextlib

import torch

from gpucourse import dtypes

# (name, input dtype or "tf32", output dtype)
LADDER = [("fp32", torch.float32, torch.float32), ("tf32", "tf32", torch.float32),
          ("fp16", torch.float16, torch.float16), ("bf16", torch.bfloat16, torch.bfloat16),
          ("fp8 e4m3", torch.float8_e4m3fn, torch.bfloat16), ("fp8 e5m2", torch.float8_e5m2, torch.bfloat16)]


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32's 10 mantissa bits (round to nearest, ties away), as float32."""
    bits = x.float().contiguous().view(torch.int32)
    bits = (bits + 0x1000) & ~0x1FFF  # 23 - 10 = 13 dropped bits
    return bits.view(torch.float32)


def fp8_quantize(x: torch.Tensor, dtype=torch.float8_e4m3fn, rowwise: bool = False) -> tuple:
    """(q, scale): x ≈ q.float() * scale, with the scale chosen so the largest |x| (per tensor, or per row with
    ``rowwise``) lands on the format's largest value. ``scale`` is float32: 0-d, or (rows, 1) row-wise."""
    amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().max()
    scale = (amax.float() / torch.finfo(dtype).max).clamp(min=1e-12)
    return (x / scale).to(dtype), scale


@contextlib.contextmanager
def tf32(enabled: bool):
    """Switch TF32 for float32 matmuls on or off inside the block (what ``torch.set_float32_matmul_precision``
    sets: "highest" = off, "high" = on), and restore the previous setting."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _fp32_matmul(a, b, on: bool):
    """``a @ b`` in float32 with TF32 tensor cores ``on`` or off, as float64."""
    with tf32(on):
        return (a.float() @ b.float()).double()


def emulate(a: torch.Tensor, b: torch.Tensor, dtype, out_dtype) -> torch.Tensor:
    """a @ b as a kernel with inputs in ``dtype`` and output in ``out_dtype`` would give it, up to accumulation
    (float64 here), as float64."""
    a64, b64 = a.double(), b.double()
    if dtype == "tf32":
        a64, b64 = round_tf32(a).double(), round_tf32(b).double()
    elif dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        qa, sa = fp8_quantize(a, dtype)
        qb, sb = fp8_quantize(b, dtype)
        a64, b64 = qa.double() * sa.double(), qb.double() * sb.double()
    else:
        a64, b64 = a.to(dtype).double(), b.to(dtype).double()
    return (a64 @ b64).to(out_dtype).double()


def rel_error(c: torch.Tensor, ref: torch.Tensor) -> float:
    """Normwise relative error ||c - ref|| / ||ref|| (Frobenius)."""
    return float((c.double() - ref).norm() / ref.norm())


def measured(a: torch.Tensor, b: torch.Tensor, dtype, out_dtype) -> torch.Tensor | None:
    """The real product on ``a``'s device (a GPU) in ``dtype``, as float64; None where this GPU has no such path."""
    from gpucourse import device

    if dtype == "tf32":
        return _fp32_matmul(a, b, on=True) if device.has_tf32() else None
    if dtype == torch.float32:
        return _fp32_matmul(a, b, on=False)
    if dtype == torch.bfloat16 and not device.has_bf16():
        return None
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        if not device.has_fp8():
            return None
        qa, sa = fp8_quantize(a, dtype)
        qb, sb = fp8_quantize(b, dtype)
        try:
            return torch._scaled_mm(qa, qb.t().contiguous().t(), scale_a=sa, scale_b=sb,
                                    out_dtype=torch.bfloat16).double()
        except (RuntimeError, ValueError):  # e.g. e5m2 x e5m2: not supported by cuBLAS
            return None
    return (a.to(dtype) @ b.to(dtype)).double()


def error_table(m: int, n: int, k: int, seed: int = 0, device=None) -> list:
    """One row per dtype of :data:`LADDER`: relative error of the emulated product and (on a GPU) of the real one,
    on the same random normal inputs (m×k and k×n), against float64."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen)
    b = torch.randn(k, n, generator=gen)
    ref = a.double() @ b.double()
    rows = []
    for name, dtype, out_dtype in LADDER:
        row = {"dtype": name, "emulated": rel_error(emulate(a, b, dtype, out_dtype), ref)}
        if dev.type == "cuda":
            got = measured(a.to(dev), b.to(dev), dtype, out_dtype)
            row["measured"] = None if got is None else rel_error(got.cpu(), ref)
        rows.append(row)
    return rows


def format_table(rows: list) -> str:
    lines = [f"{'dtype':<10} {'emulated':>10} {'measured (GPU)':>15}"]
    for r in rows:
        meas = r.get("measured", "n/a")
        meas = "n/a" if meas is None else (meas if isinstance(meas, str) else f"{meas:.2e}")
        lines.append(f"{r['dtype']:<10} {r['emulated']:>10.2e} {meas:>15}")
    return "\n".join(lines)


def scaling_errors(rows: int = 256, cols: int = 512, outlier: float = 1000.0, seed: int = 0) -> dict:
    """Quantization error of a matrix whose first row is ``outlier`` times larger than the others, with a
    per-tensor scale and with row-wise scales, for e4m3 and e5m2: normwise relative error of the *other* rows."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen)
    x[0] *= outlier
    out = {}
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        for rowwise in (False, True):
            q, s = fp8_quantize(x, dtype, rowwise)
            back = q.double() * s.double()
            out[(dtypes.torch_name(dtype).removeprefix("float8_"), "row-wise" if rowwise else "per-tensor")] = \
                rel_error(back[1:], x[1:].double())
    return out
