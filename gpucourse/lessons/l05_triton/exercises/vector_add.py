"""Lesson 05's first exercise: add two float32 vectors with a Triton kernel."""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, Exercise, Perf, above_pow2, below_pow2, between, one_of

STATEMENT = """\
Write `vector_add(x, y)` that returns a new float32 tensor `out` with `out[i] = x[i] + y[i]`, computed by a
Triton kernel you launch (`kernel[grid](...)`): `x + y` or `torch.add` do not count.
`x` and `y` are 1-D float32 tensors of the same length n >= 1 (any n, not just powers of two), on the same device.
They may be non-contiguous (for example `x = a[::2]`): pass their stride to the kernel, or make a contiguous copy
first. Do not modify `x` or `y`.
Your kernel must compute the answer: a torch compute op (arithmetic, a reduction, a matmul...) on the inputs or
on anything derived from them (a copy, a view, a buffer your kernel wrote) fails the check, which names it;
allocating, viewing, copying, casting and filling tensors is fine.
Speed (on a GPU, reported apart from correctness, which alone decides whether the check passes): at n = 2**26
contiguous float32 elements, your function's GB/s (the 12 bytes per element it must move: read x and y, write out)
against a torch copy of the same bytes timed beside it, L2 emptied before each repeat; target 0.8 of the copy's.
"""


def make_inputs(params: dict, gen) -> tuple:
    import torch

    n, step = params["n"], params.get("step", 1)
    x = torch.randn(n * step, generator=gen, dtype=torch.float32)[::step]
    y = torch.randn(n * step, generator=gen, dtype=torch.float32)[::step]
    return x, y


def reference(x, y):
    return x + y


def copy_bytes(x, y) -> int:
    return 3 * x.numel() * x.element_size()  # read x, read y, write out


EXERCISE = Exercise(
    id="vector_add",
    function="vector_add",
    signature="vector_add(x: Tensor, y: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="triton",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        # Sizes are drawn fresh for every run from each class (the seed stays with the checker).
        Case("n=1", {"n": 1}),
        Case("n just below a power of two", {"n": below_pow2(9, 12)}),
        Case("n just above a power of two", {"n": above_pow2(9, 12)}),
        Case("n not a power of two", {"n": between(2000, 5000, odd=True)}),
        Case("strided x[::step]", {"n": between(500, 1500), "step": one_of(2, 3)}),
        Case("large", {"n": device.size(cpu=between(2**17, 2**17 + 2**15, odd=True),
                                        gpu=between(2**22, 2**22 + 2**20, odd=True))}),
    ),
    determinism="bitwise",
    reference_ops=("aten.add",),
    perf=Perf(baseline="copy", target=0.8, params={"n": 2**26}, bytes=copy_bytes),
)
