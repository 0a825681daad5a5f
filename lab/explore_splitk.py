#!/usr/bin/env python3
"""Lesson 05 (issue #33): does splitting K fill the H100 on the small and odd GEMMs where lesson 05's kernels trail
cuBLAS (1000³, 3000x5000x2000, 2048x2048x8192, 16x8192x8192)?

``splitk_kernel`` below is lesson 05's persistent TMA matmul (``hopper_matmul.py``) with each output tile's K range
cut into ``SPLIT`` parts: a work unit is (tile, part), the persistent programs walk the units, and each adds its
float32 partial tile into a float32 workspace with ``tl.atomic_add``; a cast to bf16 follows. The time of a call
includes zeroing the workspace and the cast. On a GPU (bf16): per shape, cuBLAS (``torch.matmul``), lesson 05's Hopper
kernel (``hopper_matmul.matmul``) and the split kernel at SPLIT 2, 4, 8 with two tile shapes, each checked against
cuBLAS first, timed with ``triton.testing.do_bench`` (L2 cleared before each repeat), three interleaved rounds.
``--graphs``: each call replayed 20 times from a CUDA graph instead, so the host's launch cost drops out (L2 warm).
``--check`` (CPU, Triton's interpreter): the split kernel against a float64 product on odd shapes.
Prints JSON; ``--out FILE`` too.
Usage: python lab/explore_splitk.py [--check] [--graphs] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--check" in sys.argv:
    os.environ["GPUCOURSE_MODE"] = "cpu"

import gpucourse  # noqa: F401,E402  (selects the mode before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gpucourse.lessons.l05_triton import hopper_matmul  # noqa: E402
from gpucourse.tiles import grouped_tile, scratch_allocator  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
SHAPES = ((1000, 1000, 1000), (3000, 5000, 2000), (2048, 2048, 8192), (16, 8192, 8192), (4096, 4096, 4096))
TILES = ((128, 128, 64, 4, 8), (128, 256, 64, 3, 8))  # BLOCK_M, BLOCK_N, BLOCK_K, stages, warps


@triton.jit
def splitk_kernel(a_ptr, b_ptr, ws_ptr, M, N, K, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, UPCAST: tl.constexpr):
    """ws (M x N, float32, zeroed) += a @ b, each tile's K range in SPLIT parts, one work unit per (tile, part)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_part = tl.cdiv(k_steps, SPLIT)
    for u in tl.range(tl.program_id(0), tiles * SPLIT, NUM_SMS):
        t = u // SPLIT
        part = u % SPLIT
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(part * per_part, tl.minimum((part + 1) * per_part, k_steps)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
            if UPCAST:
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = (rows < M)[:, None] & (cols < N)[None, :]
        tl.atomic_add(ws_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], acc, mask=ok, sem="relaxed")


def splitk_matmul(a, b, split: int, tile=TILES[0]):
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk, stages, warps = (32, 32, 32, 1, 4) if INTERPRETED else tile
    ws = torch.zeros((M, N), device=a.device, dtype=torch.float32)
    triton.set_allocator(scratch_allocator(a.device))
    sms = 4 if INTERPRETED else torch.cuda.get_device_properties(a.device).multi_processor_count
    units = triton.cdiv(M, bm) * triton.cdiv(N, bn) * split
    splitk_kernel[(min(sms, units),)](a, b, ws, M, N, K, SPLIT=split, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                      GROUP_M=8, NUM_SMS=sms, UPCAST=INTERPRETED, num_stages=stages,
                                      num_warps=warps)
    return ws.to(a.dtype)


def check() -> dict:
    out = {}
    gen = torch.Generator().manual_seed(0)
    for m, n, k in ((1, 8, 8), (37, 40, 72), (100, 56, 200), (64, 96, 256)):
        a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
        b = torch.randn(k, n, generator=gen).to(torch.bfloat16)
        want = a.double() @ b.double()
        for split in (1, 3, 4):
            got = splitk_matmul(a, b, split).double()
            out[f"{m}x{n}x{k} split {split}"] = float(((got - want).abs() / (want.abs() + 1)).max())
    out["ok"] = all(v < 2**-7 for v in out.values())
    return out


def graph_us(fn, reps: int = 20) -> float:
    """µs per call of ``fn`` replayed ``reps`` times from one CUDA graph (no host launch between calls; L2 warm),
    the best of 10 replays."""
    from gpucourse.gpu_events import event_times, graph_repeat

    return min(event_times(graph_repeat(fn, reps, fallback=False), reps=10, warmup=2)) / reps * 1e3


def bench(graphs: bool = False) -> dict:
    res = {}
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        want = torch.matmul(a, b)
        fns = {"cuBLAS": lambda: torch.matmul(a, b), "lesson 05 Hopper": lambda: hopper_matmul.matmul(a, b)}
        for ti, tile in enumerate(TILES):
            for split in (1, 2, 4, 8):
                fns[f"split {split}, tile {tile[0]}x{tile[1]}"] = (
                    lambda s=split, t=tile: splitk_matmul(a, b, s, t))
        for name, fn in fns.items():
            torch.testing.assert_close(fn(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item(), msg=name)
        us = {name: [] for name in fns}
        for _ in range(3):
            for name, fn in fns.items():
                us[name].append(graph_us(fn) if graphs else triton.testing.do_bench(fn, return_mode="median") * 1e3)
        med = {name: sorted(v)[1] for name, v in us.items()}
        best = min((v, name) for name, v in med.items() if name.startswith("split"))
        row = {"us": med, "tflops": {name: 2 * m * n * k / v / 1e6 for name, v in med.items()},
               "best_split": best[1], "best_split_vs_cuBLAS": med["cuBLAS"] / best[0],
               "hopper_vs_cuBLAS": med["cuBLAS"] / med["lesson 05 Hopper"]}
        res[f"{m}x{n}x{k}"] = row
        print(json.dumps({"shape": f"{m}x{n}x{k}", "cuBLAS_us": med["cuBLAS"], "hopper_vs_cuBLAS":
                          row["hopper_vs_cuBLAS"], "best_split": best[1], "best_vs_cuBLAS":
                          row["best_split_vs_cuBLAS"]}), flush=True)
    return {"timing": "CUDA graphs of 20 calls, best of 10 replays, L2 warm" if graphs else
            "triton.testing.do_bench median (L2 cleared before each repeat)", "shapes": res}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="CPU: the split kernel in the interpreter on odd shapes")
    ap.add_argument("--graphs", action="store_true", help="time each call replayed from a CUDA graph (no host launch "
                    "cost between calls) instead of do_bench")
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.time()
    res = check() if a.check else bench(a.graphs)
    res.update(torch=torch.__version__, triton=triton.__version__, wall_s=time.time() - t0,
               device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    if a.check and not res["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
