"""Lesson 06's third exercise: an FP8 matmul in Triton with per-tensor scales, bf16 out.

Checked like lesson 05's matmul: fresh random inputs per case, the reference computed in float64 by the checker,
the output poisoned before the call, every case run twice (the result must be bitwise the same).

Operands. On a GPU with FP8 tensor cores (compute capability 8.9+: Ada, Hopper, Blackwell) the operands are
``float8_e4m3fn``. In CPU mode they are too when this Triton's interpreter runs FP8 ``tl.dot`` (Triton 3.9's does;
see ``_fp8_probe``); where it cannot, and on GPUs without FP8 (T4, A100), the cases are the same numbers held in
float16 (every e4m3 value is exactly a float16 value), so the same kernel is checked through another dtype. The
statement says so; the check on an FP8 GPU is the real one.

Tolerance. The inputs are exact FP8 values and the reference is their float64 product, scaled and rounded once to
bf16. A correct kernel differs from it by (1) the final rounding to bf16 (8 significant bits: up to 2^-8 of |c|
relative; Triton's interpreter truncates instead of rounding, up to 2^-7), and (2) the accumulation: products of two
FP8 numbers are exact in fp32, and their fp32 sums lose about 2^-24 per addition relative to the running sum; FP8
tensor cores on Hopper keep fewer bits while they accumulate (fast accumulation, Triton's default for FP8 on sm_90
and ``torch._scaled_mm(use_fast_accum=True)``; ``max_num_imprecise_acc`` adds them into fp32 every K step instead),
an error relative to the largest partial sums, hence to max|c|, which the checked default mode has. So the tolerance is
``rtol = 8e-3`` (one bf16 step, covering (1)) plus ``atol = 4e-3 * max|c|`` (covering (2) at the K used here).
Each bug this exercise is about is far outside it: a running sum kept in FP8 (3 mantissa bits) is off by several
percent, a scale applied twice or not at all by the scale (never near 1 here), an unmasked K tail by whole products.
"""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, Exercise, Perf, Tolerance, between

STATEMENT = """\
Write `fp8_matmul(a, b, scale_a, scale_b, precise=False)` that returns
`c = (a.float() * scale_a) @ (b.float() * scale_b)` as a new bfloat16 tensor of shape (M, N), computed by a Triton
kernel you launch: `tl.dot` on the FP8 tiles into a float32 accumulator, the scales applied once to the sums. A call
of `torch._scaled_mm`, `torch.matmul`, `@` or `torch.mm` inside your function fails the check, whatever kernel you
launch beside it. `a` is (M, K) and `b` is (K, N), both torch.float8_e4m3fn on the same device; `b` may be row-major
or column-major (K contiguous: the layout `torch._scaled_mm` wants), so use the strides. `scale_a` and `scale_b` are
per-tensor float32 scales: 0-d tensors on that device (load them in the kernel; `.item()` would wait for the GPU).
M, N and K are multiples of 16 but not of your block sizes: mask the K tail and the edges of M and N.

`precise` (the kernel's `PRECISE`) chooses how the sums accumulate. On Hopper, `tl.dot` on FP8 tiles becomes `wgmma`
instructions whose tensor cores add products into the accumulator with fewer bits than fp32, and Triton's default
for FP8 on sm_90 lets them accumulate that way across the whole K loop: *fast* accumulation, what
`torch._scaled_mm(..., use_fast_accum=True)` does, with an error that grows with K. Passing
`max_num_imprecise_acc=BLOCK_K` to `tl.dot` gives *precise* accumulation, `torch._scaled_mm`'s default: each K step's
products are summed from zero and then added into the float32 `acc` with ordinary fp32 additions. `precise=False`
(fast) is the default; the checker calls `fp8_matmul(a, b, scale_a, scale_b)` and so checks and times that mode.
`EVEN_K` is set for you by `@triton.heuristics` when K is a multiple of BLOCK_K: then no K step needs a mask, and the
loads can skip it.

FP8 `wgmma` reads both tiles K-major (K contiguous): only its 16-bit forms can transpose a tile as they read it (PTX
ISA, `wgmma.mma_async`). Loaded row-major, `b` is an order of magnitude slower in Triton: about 80 against 1,200
TFLOP/s at 8192³ (benchmarks/results/h100-explore-tensor-cores.json). So copy a row-major `b` to K-major inside the
call, knowing what that costs: K·N bytes read and written on every call, which the lesson's FP8 table prints. A model
pays it once instead, by storing its FP8 weights K-major when it quantizes them.

Where FP8 cannot run (a GPU older than compute capability 8.9, such as a T4 or an A100, or a Triton whose interpreter
cannot run FP8 `tl.dot` in CPU mode), the checker gives `a` and `b` as float16 holding the same FP8-representable
values, and the same kernel is checked through that dtype; the check on an FP8 GPU is the real one. On an FP8 GPU the
check also times your default (fast) mode against `torch._scaled_mm(..., use_fast_accum=True)` at 8192³ with a
column-major `b`, like for like: the target is 0.85 of its speed (its `Perf` in `fp8_matmul.py`).

Your kernel must compute the answer: a torch compute op (arithmetic, a reduction, a matmul...) on the inputs or
on anything derived from them (a copy, a view, a buffer your kernel wrote) fails the check, which names it;
allocating, viewing, copying, casting and filling tensors is fine.
"""

FP8 = "float8_e4m3fn"
# torch's matmuls: calling one fails the case (the answer must come from the learner's kernel) and is flagged.
_MATMUL_OPS = ("aten._scaled_mm", "aten.mm", "aten.matmul", "aten.bmm", "aten.addmm", "aten.baddbmm")


def operand_dtype() -> tuple:
    """(dtype name of a and b in the checks here, why if it is not FP8)."""
    if device.on_gpu():
        if device.has_fp8():
            return FP8, ""
        p = device.props()
        return "float16", (f"this GPU ({p.name}, compute capability {p.major}.{p.minor}) has no FP8 tensor cores: "
                           f"checked on float16 stand-ins")
    from ._fp8_probe import interpreter_runs_fp8

    ok, why = interpreter_runs_fp8()
    return (FP8, "") if ok else ("float16", why + ": checked on float16 stand-ins")


def quantize(x, dtype_name: str = FP8):
    """Per-tensor FP8 quantization: scale = amax / 448 (e4m3's largest value), q = x / scale rounded to e4m3.
    Returns (q, scale as a 0-d float32 tensor); q is float16 holding the same values when ``dtype_name`` says so."""
    import torch

    from ..precision import fp8_quantize

    q, scale = fp8_quantize(x)
    return (q if dtype_name == FP8 else q.to(getattr(torch, dtype_name))), scale


def make_inputs(params: dict, gen) -> tuple:
    import torch

    m, n, k = params["m"], params["n"], params["k"]
    dtype_name = operand_dtype()[0] if params.get("operands", "auto") == "auto" else params["operands"]
    # Data magnitudes far from 1 so that the scales are too: a scale applied twice or never changes the result.
    mag_a = float(10 ** (torch.rand(1, generator=gen) * 4 - 2))  # 0.01 .. 100
    mag_b = float(10 ** (torch.rand(1, generator=gen) * 4 - 2))
    if abs(mag_a * mag_b / 448**2 - 1) < 0.5:
        mag_b *= 10
    x = torch.randn(m, k, generator=gen) * mag_a
    y = torch.randn(k, n, generator=gen) * mag_b
    a, scale_a = quantize(x, dtype_name)
    b, scale_b = quantize(y, dtype_name)
    if params.get("layout") == "b k-major":  # column-major b, as torch._scaled_mm wants it (the checker's copies
        b = b.t().contiguous().t()  # keep these strides: a kernel must read b through b.stride())
    return a, b, scale_a, scale_b


def reference(a, b, scale_a, scale_b):
    """On the CPU (every correctness check): the float64 product of the exact FP8 values, scaled, rounded once to
    bf16. On a GPU only the speed baseline of ``Perf(baseline="reference")``: ``torch._scaled_mm`` with per-tensor
    scales (it needs b column-major, as the timed case gives it) in fast accumulation, like for like with the
    learner's default mode (``precise=False``), which is the one the checker times."""
    import torch

    if a.is_cuda and a.dtype == torch.float8_e4m3fn:
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                                use_fast_accum=True)
    c = (a.to(torch.float64) * scale_a.to(torch.float64)) @ (b.to(torch.float64) * scale_b.to(torch.float64))
    return c.to(torch.bfloat16)


def fp8_flops(a, b, *_) -> int:
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


# Multiples of 16 (whole FP8 rows of 16 bytes), drawn fresh for every run.
_LARGE = device.size(cpu=(between(80, 128, step=16), between(48, 96, step=16), between(96, 144, step=16)),
                     gpu=(between(960, 1120, step=16), between(720, 880, step=16), between(1968, 2160, step=16)))

EXERCISE = Exercise(
    id="fp8_matmul",
    function="fp8_matmul",
    signature="fp8_matmul(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, precise: bool = False) -> Tensor",
    statement=STATEMENT,
    kind="triton",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        Case("16x16x16 (one tile, smaller than the block)", {"m": 16, "n": 16, "k": 16}),
        Case("64x64x64", {"m": 64, "n": 64, "k": 64}),
        Case("48x32, K=80 (K tail)", {"m": 48, "n": 32, "k": 80}),
        Case("M=16, N=208, K=48 (one row of tiles, ragged N)", {"m": 16, "n": 208, "k": 48}),
        Case("M=144, N=16, K=32 (skinny N)", {"m": 144, "n": 16, "k": 32}),
        Case("48x40, K=64, b column-major (strides (1, 64), as torch._scaled_mm takes it)",
             {"m": 48, "n": 40, "k": 64, "layout": "b k-major"}),
        Case("large, ragged against any block", {"m": _LARGE[0], "n": _LARGE[1], "k": _LARGE[2]}),
    ),
    tolerance={"bfloat16": Tolerance(8e-3, 4e-3)},  # see the module docstring
    determinism="bitwise",
    reference_ops=_MATMUL_OPS,
    forbidden_ops=_MATMUL_OPS,
    # Fast against fast: the reference solution runs at about 0.9 of cuBLAS here (lesson 06's FP8 table), so 0.85
    # leaves the rounds' spread of a few percent between a good kernel and the target.
    perf=Perf(baseline="reference", target=0.85, params={"m": 8192, "n": 8192, "k": 8192, "layout": "b k-major"},
              flops=fp8_flops),
)
