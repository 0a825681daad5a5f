"""Lesson 03's second exercise: a fused elementwise chain, ``x * sigmoid(x) + y``, in one Triton kernel."""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, Exercise, Perf, Tolerance

STATEMENT = """\
Write `fused_swish_residual(x, y)` that returns a new tensor `out` with `out = x * sigmoid(x) + y` elementwise
(sigmoid(x) = 1 / (1 + exp(-x))), computed by ONE launch of a Triton kernel of yours: the whole chain in one pass,
each input read once and the output written once. torch ops on the data (torch.sigmoid, *, +) do not count.
`x` and `y` have the same shape (any shape, any number of elements >= 1) and dtype (float32 or float16), on the same
device; `out` has that shape and dtype. Compute in float32 inside the kernel and round once when storing.
`x` or `y` may be non-contiguous: make contiguous copies first (a copy is not a Triton launch) or use strides.
Do not modify `x` or `y`.
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
        Case("n=1", {"shape": (1,)}),
        Case("n=1025", {"shape": (1025,)}),
        Case("n=3001 (not a power of two)", {"shape": (3001,)}),
        Case("2-D 37x129", {"shape": (37, 129)}),
        Case("strided x[..., ::2], 9x300", {"shape": (9, 300), "step": 2}),
        Case("large magnitudes (x30)", {"shape": (4099,), "scale": 30.0}),
        Case("float16, n=4097", {"shape": (4097,), "dtype": "float16"}),
        Case("large", {"shape": (device.size(cpu=2**16 + 3, gpu=2**22 + 3),)}),
    ),
    # tl.sigmoid's exp may be the GPU's fast approximate exp: allow a few float32 ulps more than the default.
    tolerance={"float32": Tolerance(1e-5, 1e-6)},
    determinism="bitwise",
    reference_ops=("aten.sigmoid", "aten.mul", "aten.add", "aten.silu"),
    max_launches=1,
    perf=Perf(baseline="copy", target=0.8, params={"shape": (2**26,)}, bytes=copy_bytes),
)
