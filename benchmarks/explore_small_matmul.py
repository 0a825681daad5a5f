#!/usr/bin/env python3
"""Scratch (issue #4): why does the Hopper kernel (gpucourse.hopper_matmul) take ~80 µs for a 512³ bf16 matmul,
which the workbook's kernel does in ~8.5 µs (benchmarks/results/h100.json, triton05_matmul sweep)?

For M = N = K in (512, 1024, 2048): the config the autotuner chose; GPU time per call of every config forced one at a
time (gpucourse.bench, L2 flushed); and host time per launch (100 launches back to back, no sync in between).
Writes $OUT/explore_small_matmul.json as it goes.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpucourse  # noqa: E402,F401
import torch  # noqa: E402
import triton  # noqa: E402

from gpucourse import hopper_matmul  # noqa: E402
from gpucourse.solutions import load_solutions  # noqa: E402
from gpucourse.timing import bench  # noqa: E402

ROWS = []


def save(rec):
    print(json.dumps(rec), flush=True)
    ROWS.append(rec)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "explore_small_matmul.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": ROWS}, f, indent=1)


def host_us(fn, n=100):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return host


def main():
    workbook = load_solutions("05_triton")["matmul"]
    kernel = hopper_matmul.matmul_persistent_kernel
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for s in (512, 1024, 2048):
        a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        rec = {"size": s}
        for name, fn in (("workbook", workbook), ("hopper", hopper_matmul.matmul), ("cuBLAS", torch.matmul)):
            r = bench(fn, a, b)
            rec[f"{name}_gpu_us"] = round(r.median_ms * 1e3, 1)
            rec[f"{name}_host_us_per_launch"] = round(host_us(lambda: fn(a, b)), 1)
        rec["hopper_best_config"] = str(kernel.best_config)
        save(rec)
        # every config on its own: the jitted function without the autotuner
        c = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
        for cfg in kernel.configs:
            kw = dict(cfg.kwargs)
            grid = (min(sms, triton.cdiv(s, kw["BLOCK_M"]) * triton.cdiv(s, kw["BLOCK_N"])),)

            def call():
                kernel.fn[grid](a, b, c, c, s, s, s, ACTIVATION="none", NUM_SMS=sms, INTERPRETED=False,
                                num_warps=cfg.num_warps, num_stages=cfg.num_stages, **kw)
            try:
                r = bench(call)
                save({"size": s, "config": str(cfg), "gpu_us": round(r.median_ms * 1e3, 1),
                      "host_us_per_launch": round(host_us(call), 1)})
            except Exception as e:
                save({"size": s, "config": str(cfg), "error": f"{type(e).__name__}: {str(e)[:300]}"})


if __name__ == "__main__":
    main()
