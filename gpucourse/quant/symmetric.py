"""Symmetric quantization of a weight matrix, and how much it costs in accuracy.

A weight matrix ``w`` of shape (N, K) (``nn.Linear``'s layout: one row per output) is stored as small integers ``q``
and float32 scales, with ``w ≈ q * scale``. *Symmetric*: zero maps to zero and the integer range is
``[-qmax, qmax]`` with ``qmax = 2**(bits-1) - 1`` (127 for int8, 7 for int4), so one number per block, the scale
``max|w| / qmax``, describes the mapping. The block the scale covers is the *granularity*:

* per tensor: one scale for the whole matrix (one outlier anywhere stretches every row's grid);
* per channel: one scale per output row (the usual choice for int8);
* group-wise: one scale per ``group_size`` consecutive weights of a row (int4 needs this: 15 levels are too few for
  a whole row).

int4 values are stored one per int8 here; :mod:`.packing` puts two in a byte. A block whose weights are all zero gets
scale 1.0 (not 0.0, which would make ``w / scale`` NaN) and stores zeros.
"""
from __future__ import annotations

import torch

GRANULARITIES = ("tensor", "channel", "group")


def qmax(bits: int) -> int:
    """The largest stored integer: 127 for 8 bits, 7 for 4 bits (symmetric: -qmax..qmax)."""
    if bits not in (2, 3, 4, 5, 6, 7, 8):
        raise ValueError(f"bits must be an integer from 2 to 8 (int8 storage), not {bits!r}")
    return 2 ** (bits - 1) - 1


def _check_weight(w) -> None:
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"w must be a torch.Tensor, not {type(w).__name__}")
    if w.dim() != 2:
        raise ValueError(f"w must be 2-D (N, K), one row per output; got shape {tuple(w.shape)}")
    if not w.is_floating_point():
        raise TypeError(f"w must be a floating-point tensor, not {w.dtype}")


def _scale_of(amax: torch.Tensor, bits: int) -> torch.Tensor:
    """max|w| of each block -> its float32 scale; an all-zero block gets 1.0."""
    amax = amax.to(torch.float32)
    return torch.where(amax > 0, amax / qmax(bits), torch.ones_like(amax))


def quantize(w: torch.Tensor, bits: int = 8, granularity: str = "channel", group_size: int | None = None):
    """``(q, scale)`` with ``q`` int8 of w's shape and ``w ≈ q * scale`` broadcast per block.

    ``scale`` is float32 of shape ``()`` (tensor), ``(N,)`` (channel) or ``(N, K // group_size)`` (group).
    Rounding is to nearest (ties to even, torch.round); every |q| <= qmax(bits).
    """
    _check_weight(w)
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, not {granularity!r}")
    wf = w.detach().to(torch.float32)
    n, k = wf.shape
    if granularity == "tensor":
        scale = _scale_of(wf.abs().max(), bits)
        full = scale
    elif granularity == "channel":
        scale = _scale_of(wf.abs().amax(dim=1), bits)
        full = scale[:, None]
    else:
        if not isinstance(group_size, int) or group_size < 1 or k % group_size:
            raise ValueError(f"group_size must be a positive integer that divides K = {k}, not {group_size!r}")
        groups = wf.view(n, k // group_size, group_size)
        scale = _scale_of(groups.abs().amax(dim=2), bits)
        full = scale.repeat_interleave(group_size, dim=1)
    m = qmax(bits)
    q = torch.clamp(torch.round(wf / full), -m, m).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, group_size: int | None = None) -> torch.Tensor:
    """float32 ``q * scale``, with ``scale`` of any shape :func:`quantize` returns (group: pass ``group_size``)."""
    qf = q.to(torch.float32)
    if scale.dim() == 0:
        return qf * scale
    if scale.dim() == 1:
        return qf * scale[:, None]
    if group_size is None:
        group_size = q.shape[1] // scale.shape[1]
    return qf * scale.repeat_interleave(group_size, dim=1)

