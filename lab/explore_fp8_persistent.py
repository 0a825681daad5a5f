#!/usr/bin/env python3
"""Lesson 06 (issue #33): does the FP8 matmul reach torch._scaled_mm like for like once it is persistent and loads
its tiles with the TMA, as lesson 05's Hopper matmul does?

The workbook's ``fp8_matmul`` (one program per tile, pointer loads) ran 0.79-0.90x ``_scaled_mm`` fast/fast on an
H100 (issue #33's table). Triton's persistent TMA FP8 matmul was published at 1.05x cuBLAS at 8192x8192x4096
(triton-lang/triton PR #5461). The kernel here is lesson 05's ``matmul_persistent_kernel`` with FP8 operands: b is
given column-major (K contiguous, as ``_scaled_mm`` takes it and as Hopper's FP8 wgmma reads both operands), so its
descriptor walks bᵀ (N x K) and each tile is transposed in the dot; the per-tensor scales multiply the float32 sums
once per tile; ``precise`` adds each K step's products into the float32 sums (``max_num_imprecise_acc=BLOCK_K``,
as the workbook's precise mode).

``--check`` (CPU, Triton's interpreter, float16 operands holding FP8 values as the checker gives them where the
interpreter has no FP8 dot): against a float64 product on odd shapes. On a GPU: lesson 06's like-for-like
comparison (``fp8.fp8_like_for_like``: interleaved rounds, both accumulation modes, correctness first) of this
kernel against ``_scaled_mm`` on the five shapes of the issue. Prints JSON; ``--out FILE`` too.
Usage: python lab/explore_fp8_persistent.py [--check] [--rounds 5] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--check" in sys.argv:  # CPU mode, whatever the machine: the kernel in Triton's interpreter
    os.environ["GPUCOURSE_MODE"] = "cpu"

import gpucourse  # noqa: F401,E402  (selects the mode before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gpucourse.lessons.l05_triton.hopper_matmul import _tile, scratch_allocator  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
SHAPES = ((8192, 8192, 8192), (16384, 8192, 1024), (8192, 8192, 2048), (4096, 4096, 4096), (1024, 8192, 8192))


def configs():
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
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    done = tl.program_id(0) - NUM_SMS
    for t in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile(t, tiles_m, tiles_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])  # zeros past the edges: the K tail adds nothing
            b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            if UPCAST:  # the interpreter's checks run float16 stand-ins; float32 products are exact there
                a, b = a.to(tl.float32), b.to(tl.float32)
            if PRECISE:
                acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=BLOCK_K)
            else:
                acc = tl.dot(a, b.T, acc)
        done += NUM_SMS
        pid_m, pid_n = _tile(done, tiles_m, tiles_n, GROUP_M)
        out = (acc * scale).to(tl.bfloat16)
        if SPLIT_STORE:
            left, right = tl.split(tl.permute(tl.reshape(out, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right)
        else:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], out)


def fp8_matmul(a, b, scale_a, scale_b, precise=False):
    """The workbook's signature: ``a`` (M x K) row-major, ``b`` (K x N) column-major (``b.t()`` contiguous), FP8 (or
    float16 stand-ins in the interpreter), one-element float32 scales -> (M x N) bf16."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit (M x K and K x N)")
    bt = b.t()
    if not (a.is_contiguous() and bt.is_contiguous()):
        raise ValueError("a must be row-major and b column-major (b.t() contiguous), as torch._scaled_mm takes them")
    if (a.shape[1] * a.element_size()) % 16 or b.shape[1] % 8:
        raise ValueError(f"K = {a.shape[1]}, N = {b.shape[1]}: the TMA needs rows of a, bᵀ and c (bf16) to start on "
                         f"16-byte boundaries")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    triton.set_allocator(scratch_allocator(a.device))
    sms = 4 if INTERPRETED else torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = lambda meta: (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa: E731
    fp8_persistent_kernel[tiles](a, bt, c, scale_a, scale_b, M, N, K, PRECISE=bool(precise), NUM_SMS=sms,
                                 UPCAST=INTERPRETED)
    return c


def check() -> dict:
    """CPU: odd shapes against a float64 product, float16 operands holding FP8 values (the checker's stand-in)."""
    out = {}
    gen = torch.Generator().manual_seed(0)
    for m, n, k in ((1, 8, 16), (37, 40, 72), (64, 96, 200), (100, 56, 48)):  # N, K: the TMA's 16 bytes
        a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn).to(torch.float16)
        b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn).to(torch.float16).t()
        sa, sb = torch.tensor([0.5]), torch.tensor([3.0])
        want = (a.double() @ b.double()) * 1.5
        for precise in (False, True):
            got = fp8_matmul(a, b, sa, sb, precise=precise).double()
            err = float(((got - want).abs() / (want.abs() + 1e-3)).max())
            out[f"{m}x{n}x{k} {'precise' if precise else 'fast'}"] = err
    out["ok"] = all(v < 2**-7 for v in out.values())  # bf16's rounding of the output, nothing more
    return out


def bench(rounds: int) -> dict:
    from gpucourse.lessons.l06_tensor_cores import fp8

    res = fp8.fp8_like_for_like(fp8_matmul, shapes=SHAPES, rounds=rounds, row_major_b=False)
    print(fp8.format_like_for_like(res), flush=True)
    res["best_configs"] = {str(k): str(v) for k, v in fp8_persistent_kernel.cache.items()}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="CPU: the kernel in the interpreter on odd shapes")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.time()
    res = check() if a.check else bench(a.rounds)
    res.update(torch=torch.__version__, triton=triton.__version__, wall_s=time.time() - t0,
               device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    print(json.dumps(res, indent=1, default=str))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1, default=str)
    if a.check and not res["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
