"""Inputs for the GEMV exercises (and their tests): activations, int8 or packed int4 weights and scales, with the
edge cases the checker names.

``kind``:

* ``"random"``: weights drawn uniformly over the integer range, scales of different sizes per row (and group);
* ``"zero rows"``: every third weight row is zero with scale 1.0 (what quantizing a row of zeros gives);
* ``"cancelling"``: the second half of K undoes most of the first: ``x[:, h:] = -x[:, :h]`` with ``x[:, :h] > 0``,
  and the second half's weights equal the first half's plus a small random step. The partial sums after the first
  half are large and of one sign, the final sums small. A float32 accumulator loses nothing; a bfloat16 one (8
  significant bits) rounds the large partial sums and what is left after the cancellation is mostly that rounding.
  For int8 the weights of the first half are large (40..127) and the steps small (-2..2), so also rounding each
  dequantized weight ``q * scale`` to bfloat16 before multiplying shows; for int4 (steps -4..4) it does not: an
  int4 value times its scale loses far less than the int4 step when rounded to bfloat16.
"""
from __future__ import annotations

import torch

from gpucourse.quant import packing


def activations(m: int, k: int, gen, kind: str = "random") -> torch.Tensor:
    x = torch.randn(m, k, generator=gen)
    if kind == "cancelling":
        h = k // 2
        x[:, :h] = x[:, :h].abs() + 0.1
        x[:, h:2 * h] = -x[:, :h]
    return x.to(torch.bfloat16)


def int8_weights(n: int, k: int, gen, kind: str = "random") -> tuple:
    """(q int8 (N, K), scale float32 (N,))."""
    q = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int16)
    scale = (0.002 + 0.02 * torch.rand(n, generator=gen)).to(torch.float32)
    if kind == "cancelling":
        h = k // 2
        q[:, :h] = torch.randint(40, 128, (n, h), generator=gen, dtype=torch.int16)
        step = torch.randint(-2, 3, (n, h), generator=gen, dtype=torch.int16)
        q[:, h:2 * h] = (q[:, :h] + step).clamp(-127, 127)
    if kind == "zero rows":
        q[::3] = 0
        scale[::3] = 1.0
    return q.to(torch.int8), scale


def int4_weights(n: int, k: int, group_size: int, gen, kind: str = "random") -> tuple:
    """(q int8 (N, K) in [-8, 7], packed uint8 (N, K // 2), scales float32 (N, K // group_size))."""
    q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int16)
    scales = (0.01 + 0.1 * torch.rand(n, k // group_size, generator=gen)).to(torch.float32)
    if kind == "cancelling":
        h = k // 2
        q[:, :h] = torch.randint(1, 8, (n, h), generator=gen, dtype=torch.int16)
        step = torch.randint(-4, 5, (n, h), generator=gen, dtype=torch.int16)
        q[:, h:2 * h] = (q[:, :h] + step).clamp(-8, 7)
        g = scales.shape[1] // 2  # the second half's groups get the first half's scales, so the halves cancel
        scales[:, g:2 * g] = scales[:, :g]
    if kind == "zero rows":
        q[::3] = 0
        scales[::3] = 1.0
    q = q.to(torch.int8)
    return q, packing.pack_int4(q), scales


def dequant_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.to(torch.float64) * scale.to(torch.float64)[:, None]


def dequant_int4(q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    return q.to(torch.float64) * scales.to(torch.float64).repeat_interleave(group_size, dim=1)


def exact(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w.T`` in float64 (w already dequantized), rounded once to x's dtype."""
    return (x.to(torch.float64) @ w.to(torch.float64).T).to(x.dtype)
