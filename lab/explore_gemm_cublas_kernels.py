#!/usr/bin/env python3
"""Lesson 05 (issue #33): which kernel does cuBLAS run on the small and odd GEMMs where lesson 05's kernels trail it,
and how long does each kernel take on the GPU alone? For each shape (bf16), one call of ``torch.matmul``, of lesson
05's Hopper kernel (``hopper_matmul.matmul``) and of the workbook's ``matmul`` (``solutions/05_triton.ipynb``) under
``torch.profiler`` after warm-up: the CUDA kernels' names (cuBLAS's name carries its tile, cluster and split-K or
stream-K scheme), their grid and block where the profiler records them, and their GPU time (median of 20 profiled
calls, L2 warm). Run under ``ncu`` with ``--ncu`` to profile one call of each at 1000³ only.
Usage: python lab/explore_gemm_cublas_kernels.py [--out FILE] [--ncu]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch
from torch.profiler import ProfilerActivity, profile

from gpucourse.lessons.l05_triton import LESSON, hopper_matmul
from gpucourse.solutions import for_lesson

SHAPES = ((1000, 1000, 1000), (3000, 5000, 2000), (2048, 2048, 8192), (16, 8192, 8192), (4096, 4096, 4096),
          (8192, 8192, 8192))


def kernels_of(fn, calls: int = 20) -> list:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA], record_shapes=False) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    by_name = {}
    for e in prof.events():
        if getattr(e.device_type, "name", "") != "CUDA" or e.name.startswith(("Memset", "Memcpy")):
            continue
        by_name.setdefault(e.name, []).append(e.device_time if hasattr(e, "device_time") else e.cuda_time)
    return [dict(name=n, calls=len(ts), median_us=statistics.median(ts)) for n, ts in by_name.items()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--ncu", action="store_true")
    a = ap.parse_args()
    wb = for_lesson(LESSON)()["matmul"]
    doc = {"versions": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}, "shapes": {}}
    for m, n, k in (SHAPES[:1] if a.ncu else SHAPES):
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
        fns = {"cuBLAS": lambda: torch.matmul(x, w), "hopper": lambda: hopper_matmul.matmul(x, w),
               "workbook": lambda: wb(x, w)}
        if a.ncu:
            for fn in fns.values():
                fn()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            for fn in fns.values():
                fn()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
            continue
        row = {name: kernels_of(fn) for name, fn in fns.items()}
        doc["shapes"][f"{m}x{n}x{k}"] = row
        print(f"{m}x{n}x{k}", json.dumps(row), flush=True)
    if a.out and not a.ncu:
        json.dump(doc, open(a.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
