"""Lesson 05's third exercise: a tiled matrix multiplication in Triton, on tensor cores, for any shape."""
from __future__ import annotations

from gpucourse import device, dtypes
from gpucourse.grading.exercise import Case, Exercise, Perf, Tolerance, above_pow2, between

STATEMENT = """\
Write `matmul(a, b)` that returns `c = a @ b` as a new tensor of shape (M, N) in the inputs' dtype, computed by a
Triton kernel you launch (tiles, a loop over K, `tl.dot` accumulating in float32): `torch.matmul`/`@` do not count.
`a` is (M, K) and `b` is (K, N), both float16, bfloat16 or float32, on the same device. M, N and K can be anything
from 1 up, not just multiples of your block sizes: mask the K tail (K = 33 with BLOCK_K = 32 leaves one column) and
the edges of M and N. The inputs may be non-contiguous views (`b` can be a transposed matrix): use their strides.
So the general kernel must handle: masks on the M and N edges, the K tail (K not a multiple of BLOCK_K), and any
strides of `a` and `b` (transposed views, column slices).
The result must be bitwise deterministic: the checker runs every case twice on the same inputs and compares the
bits. That rules out split-K with atomic adds (the order the partial sums land in changes from run to run); each
output tile is summed over all of K by one program, in a fixed order.
For float32, `tl.dot`'s default TF32 precision is accepted. In CPU mode, Triton's interpreter gets `tl.dot` on
bfloat16 wrong (triton-lang/triton#11584): convert bfloat16 tiles to float32 before `tl.dot` when
`os.environ.get("TRITON_INTERPRET") == "1"`, and keep them bfloat16 on a GPU.
Your kernel must compute the answer: a torch compute op (arithmetic, a reduction, a matmul...) on the inputs or
on anything derived from them (a copy, a view, a buffer your kernel wrote) fails the check, which names it;
allocating, viewing, copying, casting and filling tensors is fine.
Speed (on a GPU, reported apart from correctness, which alone decides whether the check passes): at
M = N = K = 4096 float16 (contiguous), your function's speed against the reference, `torch.matmul` (cuBLAS), timed
beside it, L2 emptied before each repeat; target 0.9 of cuBLAS's speed (time ratio cuBLAS / yours >= 0.9).
"""


def _bf16_or_fp16() -> str:
    # bfloat16 cases need bf16 tensor cores (Ampere and later); a T4 checks them in float16 instead.
    return dtypes.for_device("bfloat16", say=False).dtype


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
_LARGE = device.size(cpu=(between(81, 111, odd=True), between(65, 95, odd=True), between(200, 300, odd=True)),
                     gpu=(between(1400, 1700, odd=True), between(900, 1200, odd=True), above_pow2(11, 11, 7)))

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
        # Sizes are drawn fresh for every run from each class (the seed stays with the checker).
        Case("fp16 ragged, K just above a power of two (K tail)", {"m": between(65, 127), "n": between(33, 100),
                                                                  "k": above_pow2(5, 6)}),
        Case(f"{_LOW} ragged", {"m": between(65, 127), "n": between(100, 160), "k": between(40, 100),
                                "dtype": _LOW}),
        Case("fp32 ragged, K just above a power of two (TF32 allowed)", {"m": between(40, 90), "n": between(20, 50),
                                                                        "k": above_pow2(7, 7),
                                                                        "dtype": "float32"}),
        Case("fp16, b a transposed view", {"m": between(50, 100), "n": between(30, 70), "k": between(60, 120),
                                           "layout": "b transposed"}),
        Case("fp16, a a column slice (strided rows)", {"m": between(30, 60), "n": between(50, 90),
                                                       "k": between(40, 70), "layout": "a column slice"}),
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
