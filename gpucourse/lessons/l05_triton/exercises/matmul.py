"""Lesson 05's third exercise: a tiled matrix multiplication in Triton, on tensor cores, for any shape."""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, Exercise, Perf, Tolerance

STATEMENT = """\
Write `matmul(a, b)` that returns `c = a @ b` as a new tensor of shape (M, N) in the inputs' dtype, computed by a
Triton kernel you launch (tiles, a loop over K, `tl.dot` accumulating in float32): `torch.matmul`/`@` do not count.
`a` is (M, K) and `b` is (K, N), both float16, bfloat16 or float32, on the same device. M, N and K can be anything
from 1 up, not just multiples of your block sizes: mask the K tail (K = 33 with BLOCK_K = 32 leaves one column) and
the edges of M and N. The inputs may be non-contiguous views (`b` can be a transposed matrix): use their strides.
For float32, `tl.dot`'s default TF32 precision is accepted. In CPU mode, Triton's interpreter gets `tl.dot` on
bfloat16 wrong (triton-lang/triton#11584): convert bfloat16 tiles to float32 before `tl.dot` when
`os.environ.get("TRITON_INTERPRET") == "1"`, and keep them bfloat16 on a GPU.
"""


def _bf16_or_fp16() -> str:
    # bfloat16 cases need bf16 tensor cores (Ampere and later); a T4 checks them in float16 instead.
    return "bfloat16" if not device.on_gpu() or device.has_bf16() else "float16"


def make_inputs(params: dict, gen) -> tuple:
    import torch

    m, n, k = params["m"], params["n"], params["k"]
    dtype = getattr(torch, params.get("dtype", "float16"))
    layout = params.get("layout", "contiguous")
    a = torch.randn(m, k + (5 if layout == "a column slice" else 0), generator=gen).to(dtype)
    a = a[:, :k]  # a no-op unless a is a column slice (row stride k + 5)
    if layout == "b transposed":
        b = torch.randn(n, k, generator=gen).to(dtype).t()  # (k, n) with strides (1, k)
    else:
        b = torch.randn(k, n, generator=gen).to(dtype)
    return a, b


def reference(a, b):
    """On the CPU (every correctness check): float64 products of the inputs, rounded once to their dtype.
    On a GPU it is only the speed baseline of ``Perf(baseline="reference")``: cuBLAS through torch.matmul."""
    import torch

    if a.is_cuda:
        return torch.matmul(a, b)
    return (a.to(torch.float64) @ b.to(torch.float64)).to(a.dtype)


def matmul_flops(a, b) -> int:
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


_LOW = _bf16_or_fp16()
_LARGE = device.size(cpu=(96, 80, 256), gpu=(1531, 1029, 2049))

EXERCISE = Exercise(
    id="matmul",
    function="matmul",
    signature="matmul(a: Tensor, b: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="triton",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        Case("1x1x1", {"m": 1, "n": 1, "k": 1}),
        Case("fp16 64x64x64 (whole blocks)", {"m": 64, "n": 64, "k": 64}),
        Case("fp16 100x70, K=33 (K tail)", {"m": 100, "n": 70, "k": 33}),
        Case(f"{_LOW} 97x131, K=77", {"m": 97, "n": 131, "k": 77, "dtype": _LOW}),
        Case("fp32 65x33, K=129 (TF32 allowed)", {"m": 65, "n": 33, "k": 129, "dtype": "float32"}),
        Case("fp16, b a transposed view, 80x48, K=96", {"m": 80, "n": 48, "k": 96, "layout": "b transposed"}),
        Case("fp16, a a column slice (strided rows), 40x72, K=50", {"m": 40, "n": 72, "k": 50,
                                                                   "layout": "a column slice"}),
        Case("fp16 large, not multiples of any block", {"m": _LARGE[0], "n": _LARGE[1], "k": _LARGE[2]}),
    ),
    # The error of a K-term dot product grows like sqrt(K), and so does max|c| for random inputs: the atol part,
    # scaled by max|expected|, follows K by construction. fp32 allows TF32 (inputs rounded to 10 mantissa bits,
    # up to ~1e-3 per product); fp16/bf16 outputs keep the defaults (their final rounding dominates).
    tolerance={"float32": Tolerance(2e-3, 2e-3)},
    determinism="bitwise",
    reference_ops=("aten.mm", "aten.matmul", "aten.bmm", "aten.addmm", "aten.baddbmm"),
    tf32_possible=True,
    perf=Perf(baseline="reference", target=0.9, params={"m": 4096, "n": 4096, "k": 4096},
              flops=matmul_flops),
)
