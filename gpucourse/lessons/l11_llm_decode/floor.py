"""The bandwidth floor of batch-1 decoding: no implementation can produce tokens faster than memory delivers the
bytes each token needs.

Each new token runs the whole model once on one position: every weight is read once (a GEMV per weight matrix,
and the tied output head reads the whole vocab x d embedding), and attention reads the KV cache of every earlier
position. At batch 1 the arithmetic per byte is about 1 FLOP per byte of bf16 weights, far below what a GPU's
compute needs to matter (an H100 does ~300 bf16 tensor-core FLOPs per byte of bandwidth), so the time per token is
at least bytes / bandwidth.

For ``Config.small()`` in bf16 at context 512::

    weights   1,235,814,400 parameters x 2 bytes                          = 2,471,628,800 bytes
    KV cache  2 (K, V) x 16 layers x 8 KV heads x 64 x 512 positions x 2  =    16,777,216 bytes
    total                                                                 = 2,488,406,016 bytes per token

and at a copy rate of 3.0e12 bytes/s that is 3.0e12 / 2.488e9 = 1,206 tokens/s. What is left out: the embedding
lookup's one row (d x 2 bytes, inside the matrix the head reads anyway), activations (a few KB per layer, they stay
on chip or in L2) and the logits (vocab x 2 bytes = 0.26 MB, 0.01%).
"""
from __future__ import annotations

import torch

from gpucourse import dtypes


def _element_bytes(dtype) -> int:
    """Bytes per element: an int passes through, a torch dtype or a name ("bf16") is looked up."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    return dtypes.nbytes(dtype)


def bytes_per_token(config, context: int, dtype=torch.bfloat16) -> int:
    """Bytes one decoding step must read: every weight once (``config.n_params`` elements) plus K and V of
    ``context`` positions in every layer (2 x n_layers x n_kv_heads x head_dim x context elements), all in
    ``dtype`` (a torch dtype, a name, or bytes per element)."""
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    e = _element_bytes(dtype)
    weights = config.n_params * e
    kv = 2 * config.n_layers * config.n_kv_heads * config.head_dim * context * e
    return weights + kv


def tokens_per_second_floor(config, bandwidth_bytes_per_s: float, context: int, dtype=torch.bfloat16) -> float:
    """The most tokens per second batch-1 decoding can reach at ``context`` positions: bandwidth (bytes/s) divided
    by :func:`bytes_per_token`. ``dtype``: the weights' and cache's type (default bf16, 2 bytes)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be positive (bytes per second), got {bandwidth_bytes_per_s}")
    return float(bandwidth_bytes_per_s) / bytes_per_token(config, context, dtype)
