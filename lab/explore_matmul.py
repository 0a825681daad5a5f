#!/usr/bin/env python3
"""Exploration behind issue #4 (lesson 05's matmul): re-runnable measurements that informed the lesson, beyond what
the `triton05_matmul` benchmark records. Uses the course's kernels as they are (the workbook's, from the solved
workbook, and `gpucourse.lessons.l05_triton.hopper_matmul`); the rejected variants tried on the way are in git
history (results files name the commit of the script that produced them).

  python3 lab/explore_matmul.py fused   torch's unfused chain piece by piece (matmul, + bias, silu, addmm),
                                               then each kernel plain and fused against it (bf16, M = N = 8192,
                                               K = 8192 and 2048; settle(), 5 interleaved rounds of 300 ms)
  python3 lab/explore_matmul.py small   small products (M = N = K = 512, 1024, 2048): GPU time per call,
                                               host time per launch, and each Hopper config launched without the
                                               autotuner

Prints one JSON line per row and writes $OUT/explore_matmul_<what>.json as it goes (with the date and the commit
of the checkout, `git rev-parse --short HEAD`, where git can tell).
"""
import datetime
import json
import os
import subprocess
import sys
import time

import gpucourse  # noqa: F401  (first: selects the mode before triton loads)
import torch
import torch.nn.functional as F
import triton

from gpucourse.lessons.l05_triton import hopper_matmul
from gpucourse.solutions import cached_solutions
from gpucourse.timing import bench, interleaved, settle

HERE = os.path.dirname(os.path.abspath(__file__))


def commit() -> str | None:
    """The checkout's commit (``git rev-parse --short HEAD``), or None where git or the repository is missing."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


class Recorder:
    def __init__(self, what: str):
        self.path = os.path.join(os.environ["OUT"], f"explore_matmul_{what}.json") if os.environ.get("OUT") else None
        self.rows = []
        self.header = {"commit": commit(),
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}

    def save(self, rec: dict) -> None:
        print(json.dumps(rec), flush=True)
        self.rows.append(rec)
        if self.path:
            with open(self.path, "w") as f:
                json.dump({**self.header, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "triton": triton.__version__, "rows": self.rows}, f, indent=1)


def kernels() -> dict:
    return {"workbook": cached_solutions("05_triton")["matmul"], "hopper": hopper_matmul.matmul}


def ms(results: dict) -> dict:
    return {f"{name}_ms": round(r.median_ms, 4) for name, r in results.items()}


def fused(rec: Recorder) -> None:
    for k in (8192, 2048):
        a = torch.randn(8192, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, 8192, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(8192, device="cuda", dtype=torch.bfloat16)
        mm = torch.matmul(a, b)
        settle(lambda: torch.matmul(a, b))
        t = interleaved({"cublas": lambda: torch.matmul(a, b), "add": lambda: mm + bias, "silu": lambda: F.silu(mm),
                          "unfused": lambda: F.silu(torch.matmul(a, b) + bias),
                          "addmm_silu": lambda: F.silu(torch.addmm(bias, a, b))}, rounds=5, rep_ms=300)
        rec.save({"K": k, "what": "torch pieces", **ms(t)})
        for name, fn in kernels().items():
            t0 = time.perf_counter()
            fn(a, b), fn(a, b, bias, "silu")  # autotune, untimed
            first_s = time.perf_counter() - t0
            settle(lambda: torch.matmul(a, b), seconds=1.0)
            t = interleaved({"plain": lambda: fn(a, b), "fused": lambda: fn(a, b, bias, "silu"),
                              "cublas": lambda: torch.matmul(a, b),
                              "unfused": lambda: F.silu(torch.matmul(a, b) + bias)}, rounds=5, rep_ms=300)
            rec.save({"K": k, "variant": name, "first_calls_s": round(first_s, 1), **ms(t),
                      "plain_vs_cublas": round(t["cublas"].median_ms / t["plain"].median_ms, 3),
                      "fused_speedup": round(t["unfused"].median_ms / t["fused"].median_ms, 3)})


def host_us(fn, n: int = 100) -> float:
    """Host time per call, launching ``n`` calls back to back (the GPU is not waited for in between)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return host


def small(rec: Recorder) -> None:
    kernel = hopper_matmul.matmul_persistent_kernel
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for s in (512, 1024, 2048):
        a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        row = {"size": s}
        for name, fn in [*kernels().items(), ("cuBLAS", torch.matmul)]:
            row[f"{name}_gpu_us"] = round(bench(fn, a, b).median_ms * 1e3, 1)
            row[f"{name}_host_us_per_launch"] = round(host_us(lambda: fn(a, b)), 1)
        row["hopper_best_config"] = str(kernel.best_config)
        rec.save(row)
        c = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
        for cfg in kernel.configs:  # each config through the jitted function, without the autotuner
            grid = (min(sms, triton.cdiv(s, cfg.kwargs["BLOCK_M"]) * triton.cdiv(s, cfg.kwargs["BLOCK_N"])),)

            def call(cfg=cfg, grid=grid):
                kernel.fn[grid](a, b, c, c, s, s, s, ACTIVATION="none", NUM_SMS=sms, INTERPRETED=False,
                                num_warps=cfg.num_warps, num_stages=cfg.num_stages, **cfg.kwargs)
            rec.save({"size": s, "config": str(cfg), "gpu_us": round(bench(call).median_ms * 1e3, 1),
                      "host_us_per_launch": round(host_us(call), 1)})


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what not in ("fused", "small"):
        sys.exit(__doc__)
    gpucourse.require_gpu("lab/explore_matmul.py")
    hopper_matmul.matmul(torch.zeros(8, 8, dtype=torch.float16, device="cuda"),
                         torch.zeros(8, 8, dtype=torch.float16, device="cuda"))  # fails early, with the reason
    {"fused": fused, "small": small}[what](Recorder(what))
