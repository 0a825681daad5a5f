"""Lesson 05's Hopper matmul: the workbook's tiled kernel rewritten for the H100's Tensor Memory Accelerator
(TMA) and a persistent grid.

Two changes from the workbook's ``matmul_kernel`` (``solutions/05_triton.ipynb``), both for GPUs of compute
capability 9.0 and newer (H100, H200, Blackwell):

* **Tensor descriptors.** ``tl.make_tensor_descriptor`` describes a whole matrix (base, shape, strides) and the tile
  to move; ``desc.load([row, col])`` then fetches a tile with the Tensor Memory Accelerator (TMA), a unit inside
  each SM that moves a tile between global and shared memory without the threads computing one address per element
  (not a "copy engine": that name belongs to the DMA engines that copy between host and device, lesson 02). It fills
  rows and columns past the matrix's edge with zeros and drops stores past it, so no masks are needed.
* **A persistent grid.** One program per SM instead of one per tile: each program walks the tiles ``pid``,
  ``pid + #SMs``, ... With the loops flattened (``tl.range(..., flatten=True)``), Triton's pipeliner starts loading
  the next tile's operands while this tile's epilogue (bias, SiLU, the store) runs, so the two can overlap.

:func:`matmul` takes the workbook's arguments (``matmul(a, b, bias=None, activation="none")``, ``activation``
"none" or "silu") and does what the workbook's does with them; :func:`unsupported` says why a call cannot take
this path (an older GPU, float32, a row not 16-byte aligned...) so callers can fall back to the portable kernel.
Measured in the lesson's ``bench.py``.
"""
from __future__ import annotations

import contextlib
import os

import torch
import triton
import triton.language as tl

from gpucourse.tiles import scratch_allocator

ACTIVATIONS = ("none", "silu")
DTYPES = (torch.float16, torch.bfloat16)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def configs():
    """Tile shapes to try on a GPU; (128, 256, 64) with 4 stages and a split epilogue won on the H100 at 8192³
    (``lab/results/h100-explore-matmul-tma.json``)."""
    if INTERPRETED:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "SPLIT_STORE": True})]
    shapes = [(128, 256, 64, 4, 8, True), (128, 256, 64, 3, 8, True), (128, 256, 64, 3, 8, False),
              (128, 128, 64, 4, 8, False), (128, 128, 128, 3, 8, False), (64, 128, 64, 4, 4, False)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "SPLIT_STORE": split},
                          num_stages=stages, num_warps=warps) for bm, bn, bk, stages, warps, split in shapes]


def configs_for_shape(configs, named_args, **kwargs):
    """Products with fewer 128 x 128 tiles than SMs (the lesson's correctness checks on 100 x 72 matrices, say) try
    only the smallest tile: timing every config there costs seconds per shape and a grid that small leaves most SMs
    idle whatever the tile."""
    if INTERPRETED or len(configs) == 1:
        return configs
    tiles = triton.cdiv(named_args["M"], 128) * triton.cdiv(named_args["N"], 128)
    if tiles >= kwargs.get("NUM_SMS", 1):
        return configs
    return [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]


@triton.jit
def _tile(t, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """Tile ``t`` of the grouped order (the workbook's): GROUP_M rows of tiles are walked column by column."""
    per_group = GROUP_M * tiles_n
    first_m = (t // per_group) * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)
    return first_m + (t % per_group) % rows, (t % per_group) // rows


@triton.autotune(configs=configs(), key=["M", "N", "K", "ACTIVATION"],
                 prune_configs_by={"early_config_prune": configs_for_shape})
@triton.jit
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SPLIT_STORE: tl.constexpr,
                             ACTIVATION: tl.constexpr, NUM_SMS: tl.constexpr, INTERPRETED: tl.constexpr):
    """c = a @ b, + bias (ACTIVATION "bias"), then SiLU ("silu"); row-major a (M×K), b (K×N), c (M×N)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    store_n: tl.constexpr = BLOCK_N // 2 if SPLIT_STORE else BLOCK_N
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, store_n])
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    # The epilogue recomputes its tile from a counter of its own, so the pipeliner does not have to carry the
    # loop's tile index from the loads (issued a tile ahead) to the store.
    done = tl.program_id(0) - NUM_SMS
    for t in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile(t, tiles_m, tiles_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])  # one TMA copy per operand tile; zeros past the edges
            b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
            if INTERPRETED:  # the interpreter's tl.dot gets bf16 wrong (see the workbook); exact in fp32
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        done += NUM_SMS
        pid_m, pid_n = _tile(done, tiles_m, tiles_n, GROUP_M)
        if ACTIVATION != "none":
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
            if ACTIVATION == "silu":
                acc = acc * tl.sigmoid(acc)
        out = acc.to(c_desc.dtype)
        if SPLIT_STORE:  # two half-width stores: a smaller staging buffer leaves shared memory for another stage
            left, right = tl.split(tl.permute(tl.reshape(out, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right)
        else:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], out)


def unsupported(a, b=None) -> str | None:
    """Why ``matmul(a, b)`` cannot run here, or None when it can: a plain-language reason for a fallback."""
    tensors = [(name, t) for name, t in (("a", a), ("b", b)) if t is not None]
    if not hasattr(tl, "make_tensor_descriptor"):
        return f"Triton {triton.__version__} has no tl.make_tensor_descriptor (Triton 3.4 or newer has)"
    if not INTERPRETED:
        if not torch.cuda.is_available():
            return "no CUDA GPU (in CPU mode the kernel runs in Triton's interpreter)"
        for name, t in tensors:
            if t.device.type != "cuda":
                return f"{name} is on {t.device}: the kernel runs on a CUDA GPU (move it with {name}.cuda())"
        major, minor = torch.cuda.get_device_capability(a.device)
        if major < 9:
            return (f"tensor descriptors (TMA) need compute capability 9.0 or newer (Hopper); {a.device} is "
                    f"{major}.{minor}: use the workbook's matmul")
    for name, t in tensors:
        if t.dtype not in DTYPES:
            return f"{name} is {t.dtype}: this kernel takes float16 or bfloat16 (the workbook's matmul takes float32)"
        if t.dim() != 2 or t.stride(1) != 1 or t.stride(0) != t.shape[1]:
            return (f"{name} must be a contiguous row-major 2-D tensor (got shape {tuple(t.shape)}, "
                    f"strides {t.stride()})")
        if (t.shape[1] * t.element_size()) % 16:
            return (f"{name}'s rows must start on 16-byte boundaries for the TMA: {name}.shape[1] = "
                    f"{t.shape[1]} is not a multiple of {16 // t.element_size()}")
        if t.data_ptr() % 16:
            return (f"{name} must start on a 16-byte boundary for the TMA (a view that begins mid-row? "
                    f"pass {name}.clone())")
    return None


def matmul(a, b, bias=None, activation: str = "none"):
    """``a @ b`` on the Hopper kernel; with ``bias``, ``a @ b + bias``; with ``activation="silu"`` too,
    ``silu(a @ b + bias)``.

    Raises ValueError for shapes, dtypes or arguments that do not fit and RuntimeError (with the reason) where this
    kernel cannot run at all; :func:`unsupported` asks without raising.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit (need M×K and K×N)")
    if a.device != b.device or (bias is not None and bias.device != a.device):
        raise ValueError(f"matmul: a, b and bias must be on one device (a on {a.device}, b on {b.device}"
                         + ("" if bias is None else f", bias on {bias.device}") + ")")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul: a is {a.dtype} and b is {b.dtype}; give both the same dtype")
    if activation not in ACTIVATIONS:
        raise ValueError(f"matmul: activation must be one of {ACTIVATIONS}, not {activation!r}")
    if activation != "none" and bias is None:
        raise ValueError(f"matmul: activation {activation!r} is applied to a @ b + bias; pass bias")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != b.shape[1] or bias.dtype != a.dtype):
        raise ValueError(f"matmul: bias must be 1-D with {b.shape[1]} {a.dtype} entries, got shape "
                         f"{tuple(bias.shape)} {bias.dtype}")
    M, K = a.shape
    N = b.shape[1]
    epilogue = "none" if bias is None else ("silu" if activation == "silu" else "bias")
    if M == 0 or N == 0 or K == 0:  # nothing to load: an empty result, or an empty sum (zeros) plus the epilogue
        c = torch.zeros((M, N), dtype=a.dtype, device=a.device)
        if bias is not None:
            c.add_(bias)
        return torch.nn.functional.silu(c, inplace=True) if epilogue == "silu" else c
    reason = unsupported(a, b)
    if reason:
        raise RuntimeError(f"the Hopper matmul cannot run here: {reason}")
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if INTERPRETED:
        sms, on_a_device = 4, contextlib.nullcontext()
    else:
        triton.set_allocator(scratch_allocator(a.device))
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        on_a_device = torch.cuda.device(a.device)  # Triton launches on the current device: make it a's
    grid = lambda meta: (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa: E731
    with on_a_device:
        matmul_persistent_kernel[grid](a, b, c, bias if bias is not None else c, M, N, K,
                                       ACTIVATION=epilogue, NUM_SMS=sms, INTERPRETED=INTERPRETED)
    return c
