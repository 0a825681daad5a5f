"""Lesson 04's first CUDA exercise: sum a float32 vector with your own kernel, built with gpucourse.cuda_build."""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, Exercise, Perf, Tolerance

STATEMENT = """\
Write `block_sum(x)` that returns the sum of the 1-D float32 CUDA tensor `x` (any length, 0 included: the sum of
nothing is 0) as a 0-d float32 tensor (shape `()`, as `x.sum()` returns it), computed by a CUDA kernel you write and
build with `gpucourse.cuda_build.build(name, kernels, binding, cpp, functions)`; `x.sum()` or `torch.sum` do not
count. Keep your `__global__` kernels in the `kernels` string (no torch headers there) and the launch in `binding`.
Call `build(...)` inside `block_sum` (it is cached, so only the first call compiles). In CPU mode `build` compiles
your kernels with nvcc and stops with "needs a GPU": the checker then shows the compiler's report instead of running
it. Accumulate in float32; the checker allows for a different summation order (a tolerance relative to the sum).
`x` is contiguous but may be a view that does not start on a 16-byte boundary (`x[1:]`, `x[3:]` of a fresh tensor:
4 or 12 bytes past one), so a kernel that loads `float4`s must handle the first elements before the first aligned
address, or not use `float4` loads there.
Your kernel must compute the answer: a torch compute op (arithmetic, a reduction...) on the inputs or on anything
derived from them (a copy, a view, a tensor your extension returned) fails the check, which names it; allocating,
viewing, copying, casting and filling tensors is fine.
"""


# What a float32 sum whose block partials arrive in any order may miss the float64 reference by (see EXERCISE).
ATOMIC_ORDER_TOLERANCE = Tolerance(rtol=2e-5, atol_scale=1e-6)


def make_inputs(params: dict, gen) -> tuple:
    import torch

    # A positive mean (values in [-0.25, 0.75)) keeps |sum| close to sum(|x|), so the relative tolerance below is a
    # tolerance scaled by sum(|x|), as the rounding of a float32 sum in any order is.
    # "offset": x is x_full[offset:], a view `offset` floats (4 * offset bytes) past an aligned start; the checker
    # keeps that misalignment on the device (keep_alignment below).
    off = params.get("offset", 0)
    return ((torch.rand(params["n"] + off, generator=gen, dtype=torch.float32) - 0.25)[off:],)


def reference(x):
    import torch

    return x.to(torch.float64).sum().to(torch.float32)


def read_bytes(x) -> int:
    return x.numel() * x.element_size()


EXERCISE = Exercise(
    id="block_sum",
    function="block_sum",
    signature="block_sum(x: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="cuda",
    # the workbook's BLOCK_SUM_CPP and functions
    cuda_binding=("torch::Tensor block_sum_cuda(torch::Tensor x);", ("block_sum_cuda",)),
    make_inputs=make_inputs,
    reference=reference,
    cases=tuple(Case(f"n={n}", {"n": n}) for n in (0, 1, 31, 32, 33, 1023, 1025, 4097, 65_537)) + (
        Case("n=2^22+3 (millions, odd)", {"n": device.size(cpu=2**16 + 3, gpu=2**22 + 3)}),
    ) + tuple(Case(f"x[{k}:], n=65537 (starts {4 * k} bytes past a 16-byte boundary)", {"n": 65_537, "offset": k})
              for k in (1, 2, 3)),
    keep_alignment=True,  # the offset cases' views stay misaligned on the GPU
    # rtol 2e-5 of |sum| (about sum(|x|) here). A right kernel may add its block partials with atomics, in an order
    # that changes between runs: float32 additions of n/block partials one after another into a total near 1e6. For
    # n = 2^22+3, simulated in that order (tests/lessons/test_l04_cuda_reduction.py), the error reaches 3.3e-6 of
    # the sum with 256-thread blocks and 8.7e-6 with 64-thread ones; on the H100 a right 256-thread submission once
    # landed at 6.3e-6, and the old 5e-6 failed it (benchmarks/results/h100-grading-throughput.json). Losing one
    # block of 256 values costs about 6e-5 of the sum, and the races the checker must catch cost far more. float32
    # sums in another order differ in the last bits; atomics make the order change between runs, so the determinism
    # check (run twice) allows the same tolerance rather than demanding identical bits.
    tolerance={"float32": ATOMIC_ORDER_TOLERANCE},
    determinism="tolerance",
    reference_ops=("aten.sum",),
    gpu_only=True,
    # The benchmark compares with torch.sum (target 0.95x); here the learner gets the copy ceiling as the yardstick.
    perf=Perf(baseline="copy", target=0.85, params={"n": 2**28}, bytes=read_bytes),
)
