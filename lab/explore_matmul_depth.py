#!/usr/bin/env python3
"""Lesson 05 (issue #33): cuBLAS wins the small GEMMs with the same tiles as ours (at 1000³: 128 tiles of 64x128, one
wave, no split-K) but a deeper pipeline (8 stages in 214 KB of shared memory), 3 warpgroups (a producer and two
consumers: warp specialization) and clusters of 2 CTAs (``lab/results/h100-ncu-gemm-1000.txt``). Which of these can
Triton 3.x give lesson 05's TMA kernel?

``depth_kernel`` below is lesson 05's Hopper matmul (``hopper_matmul.py``) without the persistent loop (one tile per
program: at these sizes every tile fits in one wave anyway) and with its K loop written
``tl.range(..., warp_specialize=WS)``. Each (tile, stages, warps, WS, num_ctas) is checked against cuBLAS, then
timed replayed from a CUDA graph (20 calls per graph, best of 10 replays, L2 warm), beside cuBLAS and lesson 05's
autotuned Hopper kernel; three rounds, median. Prints JSON; ``--out FILE`` too.
Usage: python lab/explore_matmul_depth.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch
import triton
import triton.language as tl

from gpucourse.lessons.l05_triton import hopper_matmul
from gpucourse.tiles import grouped_tile, scratch_allocator

SHAPES = ((1000, 1000, 1000), (3000, 5000, 2000), (2048, 2048, 8192), (16, 8192, 8192), (4096, 4096, 4096))
# BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, warp_specialize, num_ctas
CONFIGS = [(64, 128, 64, 4, 4, False, 1), (64, 128, 64, 6, 4, False, 1), (64, 128, 64, 8, 4, False, 1),
           (64, 128, 64, 4, 4, True, 1), (64, 128, 64, 6, 4, True, 1), (128, 128, 64, 4, 8, False, 1),
           (128, 128, 64, 6, 8, False, 1), (128, 128, 64, 4, 8, True, 1), (128, 256, 64, 3, 8, False, 1),
           (128, 256, 64, 4, 8, True, 1), (64, 128, 64, 6, 4, False, 2), (16, 128, 128, 6, 4, False, 1),
           (16, 64, 128, 8, 4, False, 1)]


@triton.jit
def depth_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr, WS: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=WS):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def depth_matmul(a, b, cfg):
    bm, bn, bk, stages, warps, ws, ctas = cfg
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    depth_kernel[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                              GROUP_M=8, WS=ws, num_stages=stages, num_warps=warps,
                                                              num_ctas=ctas)
    return c


def graph_us(fn, reps: int = 20) -> float:
    from gpucourse.gpu_events import event_times, graph_repeat

    return min(event_times(graph_repeat(fn, reps, fallback=False), reps=10, warmup=2)) / reps * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    a_ = ap.parse_args()
    triton.set_allocator(scratch_allocator(torch.device("cuda")))
    doc = {"versions": {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name()},
           "timing": "CUDA graphs of 20 calls, best of 10 replays, L2 warm; median of 3 rounds", "shapes": {}}
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        want = torch.matmul(a, b)
        fns = {"cuBLAS": lambda: torch.matmul(a, b), "lesson 05 Hopper": lambda: hopper_matmul.matmul(a, b)}
        errors = {}
        for cfg in CONFIGS:
            name = "x".join(map(str, cfg[:3])) + f" s{cfg[3]} w{cfg[4]}" + (" ws" if cfg[5] else "") + \
                (f" ctas{cfg[6]}" if cfg[6] > 1 else "")
            fn = (lambda cfg=cfg: depth_matmul(a, b, cfg))
            try:
                got = fn()
                torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
                graph_us(fn)
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            fns[name] = fn
        us = {name: [] for name in fns}
        for _ in range(3):
            for name, fn in fns.items():
                us[name].append(graph_us(fn))
        med = {name: sorted(v)[1] for name, v in us.items()}
        vs = {name: med["cuBLAS"] / v for name, v in med.items()}
        best = max((v, name) for name, v in vs.items() if name not in ("cuBLAS", "lesson 05 Hopper"))
        doc["shapes"][f"{m}x{n}x{k}"] = {"us": med, "vs_cuBLAS": vs, "best": best[1], "errors": errors}
        print(f"{m}x{n}x{k}", json.dumps({"best": best, "hopper": round(vs["lesson 05 Hopper"], 3),
                                          "all": {n_: round(x, 3) for n_, x in vs.items()}, "errors": errors}),
              flush=True)
    if a_.out:
        json.dump(doc, open(a_.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
