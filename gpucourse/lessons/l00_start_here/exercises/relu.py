"""The warm-up exercise of the first workbook: ReLU in plain torch (no kernel needed)."""
from __future__ import annotations

from gpucourse.grading.exercise import Case, Exercise

STATEMENT = """\
Write `relu(x)` that returns a new tensor with `max(x, 0)` elementwise, for a float32 tensor `x` of any shape
(it may be non-contiguous). Plain torch is fine here. Do not modify `x`.
"""


def make_inputs(params: dict, gen) -> tuple:
    import torch

    x = torch.randn(*params["shape"], generator=gen, dtype=torch.float32) * params.get("scale", 1.0)
    if params.get("zeros"):
        x[::3] = 0.0  # exact zeros: relu(0) must be 0
    if params.get("transpose"):
        x = x.t()
    return (x,)


def reference(x):
    import torch

    return torch.relu(x)


EXERCISE = Exercise(
    id="relu",
    function="relu",
    signature="relu(x: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="none",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        Case("one element", {"shape": (1,)}),
        Case("n=1023 with zeros", {"shape": (1023,), "zeros": True}),
        Case("2-D 37x64", {"shape": (37, 64)}),
        Case("3-D 3x5x7", {"shape": (3, 5, 7)}),
        Case("transposed (non-contiguous) 64x37", {"shape": (37, 64), "transpose": True}),
        Case("large magnitudes", {"shape": (4096,), "scale": 1e30}),
    ),
    determinism=None,
)
