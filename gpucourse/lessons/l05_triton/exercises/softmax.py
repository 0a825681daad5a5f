"""Lesson 05's second exercise: a row-wise softmax in one Triton kernel, each row read once and written once."""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, Exercise, Perf, Tolerance, above_pow2, below_pow2, between

STATEMENT = """\
Write `softmax(x)` that returns a new tensor `out` of the same shape and dtype with
`out[i, j] = exp(x[i, j]) / sum_k exp(x[i, k])` (softmax over the last dimension), computed by a Triton kernel you
launch: `torch.softmax` does not count.
`x` is a 2-D float32 or float16 tensor with any number of rows and any width from 1 to 16384 (not just powers of
two). Its rows may be strided: `x` can be a view such as `big[:, :w]` or `big[::2]`, so use `x.stride(0)`.
Inputs can be large (|x| up to about 6e4): `exp(60000)` overflows, so subtract the row's maximum first.
Compute in float32 and store in the input's dtype. Do not modify `x`.
The kernel's `x_col_stride` argument is `x.stride(1)`: every input the checker builds has unit column stride (1),
so a kernel that assumes contiguous columns passes too; using it keeps the kernel right for any view.
Your kernel must compute the answer: a torch compute op (arithmetic, a reduction, a matmul...) on the inputs or
on anything derived from them (a copy, a view, a buffer your kernel wrote) fails the check, which names it;
allocating, viewing, copying, casting and filling tensors is fine.
Speed (on a GPU, reported apart from correctness, which alone decides whether the check passes): at 8192x8192
float32, your function's GB/s (the 8 bytes per element it must move: read x once, write out once) against a torch
copy of the same bytes timed beside it, L2 emptied before each repeat; target 0.8 of the copy's.
"""

MAX_ABS = 6.0  # inputs are standard normals clipped to +-6 before scaling, so fp16 inputs scaled by 1e4 stay finite


def make_inputs(params: dict, gen) -> tuple:
    import torch

    rows, cols = params["rows"], params["cols"]
    dtype = getattr(torch, params.get("dtype", "float32"))
    layout = params.get("layout", "contiguous")
    full_rows = rows * 2 if layout == "every other row" else rows
    full_cols = cols + 37 if layout == "column slice" else cols
    x = torch.randn(full_rows, full_cols, generator=gen, dtype=torch.float32).clamp_(-MAX_ABS, MAX_ABS)
    x = (x * params.get("scale", 1.0)).to(dtype)
    if layout == "every other row":
        x = x[::2]  # row stride 2 * cols
    elif layout == "column slice":
        x = x[:, :cols]  # row stride cols + 37
    return (x,)


def reference(x):
    import torch

    return torch.softmax(x.to(torch.float64), dim=-1).to(x.dtype)


def copy_bytes(x) -> int:
    return 2 * x.numel() * x.element_size()  # read x once, write out once


EXERCISE = Exercise(
    id="softmax",
    function="softmax",
    signature="softmax(x: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="triton",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        # Sizes are drawn fresh for every run from each class (the seed stays with the checker).
        Case("width 1", {"rows": between(3, 9), "cols": 1}),
        Case("width just below a power of two", {"rows": between(2, 4), "cols": below_pow2(8, 10)}),
        Case("width just above a power of two", {"rows": between(2, 4), "cols": above_pow2(10, 11)}),
        Case("width not a power of two, fp16", {"rows": between(2, 5), "cols": between(2000, 5000, odd=True),
                                                "dtype": "float16"}),
        Case("width 16384", {"rows": 2, "cols": 16384}),
        Case("width 16384, fp16", {"rows": 2, "cols": 16384, "dtype": "float16"}),
        Case("strided rows: big[:, :w]", {"rows": between(4, 8), "cols": between(500, 1000),
                                          "layout": "column slice"}),
        Case("strided rows: big[::2], fp16", {"rows": between(3, 7), "cols": between(200, 400), "dtype": "float16",
                                                    "layout": "every other row"}),
        Case("large magnitudes (x1e4)", {"rows": 4, "cols": between(300, 700), "scale": 1e4}),
        Case("large magnitudes (x1e4), fp16", {"rows": 4, "cols": between(300, 700), "scale": 1e4,
                                               "dtype": "float16"}),
        # More rows than any round grid cap (64, 128, ..., 1024), in CPU mode too: a grid of min(rows, 64) programs
        # passed here when this case had 64 rows. Narrow in CPU mode, where each program costs interpreter time.
        Case("many rows", {"rows": device.size(cpu=between(1040, 1200), gpu=between(4097, 6000)),
                           "cols": device.size(cpu=between(5, 12), gpu=between(900, 1100))}),
    ),
    # fp32: exp, the sum over up to 16384 terms and the division each round a little (a GPU's exp is a fast
    # approximation): a few 1e-6 of relative error is honest work; fp16 arithmetic would be ~1e-3.
    tolerance={"float32": Tolerance(1e-5, 1e-6)},
    determinism="bitwise",
    reference_ops=("aten._softmax", "aten.softmax", "aten._log_softmax"),
    perf=Perf(baseline="copy", target=0.8, params={"rows": 8192, "cols": 8192}, bytes=copy_bytes),
)
