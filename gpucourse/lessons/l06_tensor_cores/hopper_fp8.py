"""Lesson 06's FP8 matmul for Hopper: the workbook's ``fp8_matmul`` made persistent, its tiles loaded by the TMA.

The workbook's kernel (``solutions/06_tensor_cores.ipynb``) gives each output tile a program and loads its operands
with pointer arithmetic. This one makes the two changes lesson 05's Hopper matmul makes for bf16
(``gpucourse/lessons/l05_triton/hopper_matmul.py``):

* **The TMA.** ``tl.make_tensor_descriptor`` describes a whole matrix and the tile to move; ``desc.load([row, col])``
  fetches a tile with the SM's Tensor Memory Accelerator, zeros past the edges, with no address per element
  computed by the threads.
* **A persistent grid.** One program per SM walks the tiles ``pid``, ``pid + #SMs``, ... in lesson 05's grouped
  order; with the loops flattened, Triton's pipeliner loads the next tile's operands while this tile's epilogue
  (the scales, the bf16 store) runs.

Both operands arrive K-contiguous: ``a`` row-major and ``b`` column-major, as ``torch._scaled_mm`` takes them and as
Hopper's FP8 ``wgmma`` reads them from shared memory, so the descriptor of ``b`` walks bᵀ (N x K) and the dot takes
its tile transposed. The per-tensor scales multiply the float32 sums once per tile. ``precise=True`` adds each K
step's products into the float32 sums (``max_num_imprecise_acc=BLOCK_K``), the workbook's precise mode.

Hopper only (compute capability 9.0 and newer): :func:`unsupported` says why a call cannot take this path. In CPU
mode it runs in Triton's interpreter on float16 stand-ins holding FP8 values (the interpreter has no FP8 dot), as
the workbook's checker does. The exploration behind it is ``lab/explore_fp8_persistent.py``.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from gpucourse.tiles import grouped_tile, scratch_allocator

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
FP8 = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name))


def configs():
    """Tile shapes to try on a GPU: the FP8 wgmma takes K 32 deep, so BLOCK_K is 128 (one 128-byte row of a tile);
    (128, 256) tiles with a split epilogue won at 8192³ on an H100 (``lab/results/h100-explore-fp8-persistent.json``)."""
    if INTERPRETED:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "SPLIT_STORE": False})]
    shapes = [(128, 256, 128, 3, 8, True), (128, 256, 128, 4, 8, True), (128, 256, 128, 3, 8, False),
              (256, 128, 128, 3, 8, True), (128, 128, 128, 4, 8, False), (128, 128, 128, 5, 4, False),
              (64, 256, 128, 4, 4, False)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "SPLIT_STORE": split},
                          num_stages=stages, num_warps=warps) for bm, bn, bk, stages, warps, split in shapes]


@triton.autotune(configs=configs(), key=["M", "N", "K", "PRECISE"])
@triton.jit
def fp8_persistent_kernel(a_ptr, bt_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, PRECISE: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                          SPLIT_STORE: tl.constexpr, NUM_SMS: tl.constexpr, UPCAST: tl.constexpr):
    """c = (a @ b) * scale_a * scale_b in bf16; a (M x K) and bt = bᵀ (N x K) row-major."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(bt_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    store_n: tl.constexpr = BLOCK_N // 2 if SPLIT_STORE else BLOCK_N
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, store_n])
    scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # The epilogue recomputes its tile from a counter of its own, so the pipeliner does not carry the loop's tile
    # index from the loads (issued a tile ahead) to the store.
    done = tl.program_id(0) - NUM_SMS
    for t in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])  # zeros past the edges: the K tail adds nothing
            b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            if UPCAST:  # the interpreter's stand-ins: float32 products of FP8 values are exact
                a, b = a.to(tl.float32), b.to(tl.float32)
            if PRECISE:
                acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=BLOCK_K)
            else:
                acc = tl.dot(a, b.T, acc)
        done += NUM_SMS
        pid_m, pid_n = grouped_tile(done, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        out = (acc * scale).to(tl.bfloat16)
        if SPLIT_STORE:  # two half-width stores: a smaller staging buffer leaves shared memory for another stage
            left, right = tl.split(tl.permute(tl.reshape(out, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right)
        else:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], out)


def unsupported(a, b) -> str | None:
    """Why ``fp8_matmul(a, b, ...)`` cannot run here, or None when it can: a plain-language reason for a fallback
    (the workbook's kernel runs everywhere FP8 does)."""
    if not hasattr(tl, "make_tensor_descriptor"):
        return f"Triton {triton.__version__} has no tl.make_tensor_descriptor (Triton 3.4 or newer has)"
    if not INTERPRETED:
        if not torch.cuda.is_available():
            return "no CUDA GPU (in CPU mode the kernel runs in Triton's interpreter)"
        if a.device.type != "cuda" or b.device.type != "cuda":
            return f"a is on {a.device} and b on {b.device}: the kernel runs on a CUDA GPU"
        major, minor = torch.cuda.get_device_capability(a.device)
        if major < 9:
            return (f"tensor descriptors (TMA) need compute capability 9.0 or newer (Hopper); {a.device} is "
                    f"{major}.{minor}: use the workbook's fp8_matmul")
        if a.dtype not in FP8 or b.dtype not in FP8:
            return f"a is {a.dtype} and b {b.dtype}: this kernel takes FP8 (torch.float8_e4m3fn or float8_e5m2)"
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        return f"shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit (M x K and K x N)"
    if not (a.is_contiguous() and b.t().is_contiguous()):
        return "a must be row-major and b column-major (b.t() contiguous), as torch._scaled_mm takes them"
    k, n = a.shape[1], b.shape[1]
    if (k * a.element_size()) % 16 or (n * 2) % 16:
        return (f"K = {k}, N = {n}: the TMA needs every row of a, bᵀ and the bf16 result to start on a 16-byte "
                f"boundary (K a multiple of {16 // a.element_size()}, N of 8)")
    return None


def unavailable() -> str | None:
    """Why this kernel cannot be timed on this machine (CPU mode, no FP8 tensor cores, not Hopper, an old Triton),
    or None when it can: :func:`unsupported` asked about FP8 operands on the current GPU."""
    from gpucourse import device

    if not device.on_gpu() or not device.has_fp8():
        return "this kernel needs a CUDA GPU of compute capability 9.0 (Hopper)"
    probe = torch.empty((16, 16), device="cuda", dtype=torch.float8_e4m3fn)
    return unsupported(probe, probe.t())


def fp8_matmul(a, b, scale_a, scale_b, precise: bool = False):
    """The workbook's signature: ``a`` (M x K) row-major, ``b`` (K x N) column-major (``b.t()`` contiguous), FP8
    (float16 stand-ins in the interpreter), one-element float32 scales -> (M x N) bf16. Raises ValueError with
    :func:`unsupported`'s reason where it cannot run."""
    why = unsupported(a, b)
    if why:
        raise ValueError(f"fp8_matmul (Hopper): {why}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    triton.set_allocator(scratch_allocator(a.device))
    sms = 4 if INTERPRETED else torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = lambda meta: (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa: E731
    fp8_persistent_kernel[grid](a, b.t(), c, scale_a, scale_b, M, N, K, PRECISE=bool(precise), NUM_SMS=sms,
                                UPCAST=INTERPRETED)
    return c
