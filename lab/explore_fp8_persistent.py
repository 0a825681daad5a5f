#!/usr/bin/env python3
"""Lesson 06 (issue #33): does the FP8 matmul reach torch._scaled_mm like for like once it is persistent and loads
its tiles with the TMA, as lesson 05's Hopper matmul does?

The workbook's ``fp8_matmul`` (one program per tile, pointer loads) ran 0.79-0.90x ``_scaled_mm`` fast/fast on an
H100 (issue #33's table). Triton's persistent TMA FP8 matmul was published at 1.05x cuBLAS at 8192x8192x4096
(triton-lang/triton PR #5461). The kernel here is lesson 05's ``matmul_persistent_kernel`` with FP8 operands: b is
given column-major (K contiguous, as ``_scaled_mm`` takes it and as Hopper's FP8 wgmma reads both operands), so its
descriptor walks bᵀ (N x K) and each tile is transposed in the dot; the per-tensor scales multiply the float32 sums
once per tile; ``precise`` adds each K step's products into the float32 sums (``max_num_imprecise_acc=BLOCK_K``,
as the workbook's precise mode). The kernel has since moved into lesson 06 (``hopper_fp8.py``); this script imports
it from there.

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

from gpucourse.lessons.l06_tensor_cores.hopper_fp8 import fp8_matmul, fp8_persistent_kernel  # noqa: E402

SHAPES = ((8192, 8192, 8192), (16384, 8192, 1024), (8192, 8192, 2048), (4096, 4096, 4096), (1024, 8192, 8192))


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
