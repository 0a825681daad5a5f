"""Lesson 07's quantization error: how far a quantized weight is from the original (:func:`errors`) and the table of
errors and storage costs over bit widths and granularities (:func:`error_table`).

The quantization itself (symmetric, per tensor, per channel or group-wise) is the kit's
:mod:`gpucourse.quant.symmetric`, which lesson 11 uses too; its names are re-exported here for the lesson's notebook.
"""
from __future__ import annotations

import torch

from gpucourse.quant.symmetric import GRANULARITIES, _scale_of, dequantize, qmax, quantize  # noqa: F401 (re-exported)


def errors(w: torch.Tensor, w_hat: torch.Tensor) -> dict:
    """How far ``w_hat`` is from ``w``: relative Frobenius error ``||w - w_hat|| / ||w||`` and the largest
    absolute error, in float64."""
    a, b = w.detach().to(torch.float64), w_hat.detach().to(torch.float64)
    d = a - b
    norm = float(torch.linalg.norm(a))
    return {"rel_fro": float(torch.linalg.norm(d)) / norm if norm else float(torch.linalg.norm(d)),
            "max_abs": float(d.abs().max()) if d.numel() else 0.0}


def error_table(w: torch.Tensor, settings=None) -> list:
    """The error of each (bits, granularity, group_size) in ``settings`` on ``w``, with its storage cost in bits
    per weight (the integers plus a float32 scale per block)."""
    if settings is None:
        settings = [(8, "tensor", None), (8, "channel", None), (8, "group", 128),
                    (4, "tensor", None), (4, "channel", None), (4, "group", 128), (4, "group", 64),
                    (4, "group", 32)]
    n, k = w.shape
    rows = []
    for bits, gran, g in settings:
        q, s = quantize(w, bits, gran, g)
        e = errors(w, dequantize(q, s, g))
        blocks = 1 if gran == "tensor" else n if gran == "channel" else n * (k // g)
        rows.append({"bits": bits, "granularity": gran, "group_size": g,
                     "bits_per_weight": bits + 32 * blocks / (n * k), **e})
    return rows
