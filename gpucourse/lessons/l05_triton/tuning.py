"""The tile shapes workbook 05's matmul autotunes over, and how it prunes them by problem shape.

These are the tuning tables of the reference solution, kept out of the workbook's cell so the learner's view of the
exercise is the kernel: ``@triton.autotune(configs=matmul_configs(), key=[...], prune_configs_by={"early_config_prune":
prune_by_shape})``. Lesson 05's section 4b measures what they buy off the benchmark shape (a few rows, a small
output, K = N = 1000).
"""
from __future__ import annotations

import os

import torch
import triton

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps) for three kinds of problem:
BIG = [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 8), (128, 64, 64, 4, 4),
       (64, 64, 32, 4, 4)]                                           # large products: big tiles, few loads per flop
SMALL = [(64, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (128, 128, 64, 4, 8)]  # too few big tiles
SKINNY = [(16, 64, 256, 3, 4), (16, 128, 128, 4, 4), (32, 64, 128, 4, 4)]   # M <= 32: a few rows, read B once
INTERPRETER_TILE = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}  # CPU mode: nothing to tune


def interpreted() -> bool:
    """Triton's CPU interpreter is on (``TRITON_INTERPRET=1``, set by ``gpucourse.setup()`` without a GPU)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _key(c) -> tuple:
    return (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_stages, c.num_warps)


def matmul_configs() -> list:
    """The tile shapes @triton.autotune may try on a GPU (timed once per new M, N, K and epilogue); one small tile
    in the interpreter."""
    if interpreted():
        return [triton.Config(dict(INTERPRETER_TILE))]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
            for bm, bn, bk, s, w in dict.fromkeys(BIG + SMALL + SKINNY)]


def _sm_count() -> int | None:
    """The current GPU's SM count (None without one)."""
    return torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else None


def prune_by_shape(configs, named_args, **kwargs) -> list:
    """Which configs to time for this shape: the skinny ones when M is tiny, the small ones when a grid of
    128 x 128 tiles would not give every SM one, the big ones otherwise (fewer configs, shorter tuning)."""
    sms = _sm_count()
    if interpreted() or sms is None:
        return configs
    M, N = named_args["M"], named_args["N"]
    if M <= 32:
        wanted = SKINNY
    elif triton.cdiv(M, 128) * triton.cdiv(N, 128) < sms:
        wanted = SMALL
    else:
        wanted = BIG
    keep = [c for c in configs if _key(c) in wanted]
    return keep or configs


def row_alignment(args) -> int:
    """Elements per 16-byte access that the row strides of a and b are multiples of (1: no hint). Triton proves a
    stride is a multiple of 16 only when it is one; for K = N = 1000 in bf16 each row still starts on a 16-byte
    boundary, and saying so (``tl.multiple_of``) keeps the loads 16 bytes wide."""
    vec = 16 // args["a_ptr"].element_size()
    while vec > 1 and (args["stride_am"] % vec or args["stride_bk"] % vec):
        vec //= 2
    return vec


def even_k(args) -> bool:
    """BLOCK_K divides K: the K loop needs no masked last step."""
    return args["K"] % args["BLOCK_K"] == 0
