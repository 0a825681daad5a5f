"""Lesson 03's second exercise: a fused elementwise chain, ``x * sigmoid(x) + y``, in one Triton kernel."""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, Exercise, Perf, Tolerance, above_pow2, between

STATEMENT = """\
Write `fused_swish_residual(x, y)` that returns a new tensor `out` with `out = x * sigmoid(x) + y` elementwise
(sigmoid(x) = 1 / (1 + exp(-x))), computed by ONE launch of a Triton kernel of yours: the whole chain in one pass,
each input read once and the output written once. torch ops on the data (torch.sigmoid, *, +) do not count.
`x` and `y` have the same shape (any shape, any number of elements >= 1) and dtype (float32 or float16), on the same
device; `out` has that shape and dtype. Compute in float32 inside the kernel and round once when storing.
`x` or `y` may be non-contiguous: make contiguous copies first (a copy is not a Triton launch) or use strides.
Do not modify `x` or `y`.
Your kernel must compute the answer: a torch compute op (arithmetic, a reduction, a matmul...) on the inputs or
on anything derived from them (a copy, a view, a buffer your kernel wrote) fails the check, which names it;
allocating, viewing, copying, casting and filling tensors is fine.
"""


def make_inputs(params: dict, gen) -> tuple:
    import torch

    dtype = getattr(torch, params.get("dtype", "float32"))
    shape, step = params["shape"], params.get("step", 1)
    big = list(shape[:-1]) + [shape[-1] * step]
    x = (torch.randn(big, generator=gen) * params.get("scale", 1.0)).to(dtype)[..., ::step]
    y = torch.randn(big, generator=gen).to(dtype)[..., ::step]
    return x, y


def reference(x, y):
    import torch

    xf = x.float()
    return (xf * torch.sigmoid(xf) + y.float()).to(x.dtype)


def copy_bytes(x, y) -> int:
    return 3 * x.numel() * x.element_size()  # read x, read y, write out


EXERCISE = Exercise(
    id="fused_swish_residual",
    function="fused_swish_residual",
    signature="fused_swish_residual(x: Tensor, y: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="triton",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        # Sizes are drawn fresh for every run from each class (the seed stays with the checker).
        Case("n=1", {"shape": (1,)}),
        Case("n just above a power of two", {"shape": (above_pow2(9, 12),)}),
        Case("n not a power of two", {"shape": (between(2000, 5000, odd=True),)}),
        Case("2-D, ragged", {"shape": (between(20, 50), between(100, 200, odd=True))}),
        Case("strided x[..., ::2]", {"shape": (between(5, 12), between(200, 400)), "step": 2}),
        Case("large magnitudes (x30)", {"shape": (between(3000, 5000),), "scale": 30.0}),
        Case("float16, n just above a power of two", {"shape": (above_pow2(11, 12),), "dtype": "float16"}),
        Case("large", {"shape": (device.size(cpu=between(2**16, 2**16 + 2**14, odd=True),
                                             gpu=between(2**22, 2**22 + 2**20, odd=True)),)}),
    ),
    # tl.sigmoid's exp may be the GPU's fast approximate exp: allow a few float32 ulps more than the default.
    tolerance={"float32": Tolerance(1e-5, 1e-6)},
    determinism="bitwise",
    reference_ops=("aten.sigmoid", "aten.mul", "aten.add", "aten.silu"),
    max_launches=1,
    perf=Perf(baseline="copy", target=0.8, params={"shape": (2**26,)}, bytes=copy_bytes),
)
