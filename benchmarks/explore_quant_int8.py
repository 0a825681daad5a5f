#!/usr/bin/env python3
"""Exploration behind issue #15, fourteenth round: the workbook's int8 GEMV at M = 1, block sizes.

The workbook solution (solutions/07_quantization.ipynb, ``int8_gemv``: a rows kernel, each program BLOCK_N rows of
q, BLOCK_K columns a step, loads issued STAGES steps ahead) is what the course's int8 target (>= 1.8x bf16 cuBLAS at
M = 1 on three shapes) is held to; with its defaults the lesson run measured 1.78 / 1.70 / 1.87x (results/h100.json,
quant07_gemv). This times it with other block sizes, beside the lesson kernel (``kernels.w8a16_gemv``) and bf16
cuBLAS, in interleaved rounds with L2 flushed by a read.

    python3 benchmarks/explore_quant_int8.py   (writes $OUT/explore_quant_int8.json)
"""
import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from gpucourse.lessons.l07_quantization import bench, kernels, measure  # noqa: E402
from gpucourse.timing import interleaved  # noqa: E402

# (BLOCK_N, BLOCK_K, STAGES, num_warps); the first is the solution's default
CONFIGS = [(8, 1024, 3, 4), (4, 1024, 3, 4), (16, 1024, 3, 4), (8, 2048, 3, 4), (8, 512, 3, 4), (8, 1024, 4, 4),
           (8, 1024, 2, 4), (8, 1024, 3, 8), (4, 2048, 3, 4), (16, 512, 3, 4), (2, 2048, 3, 2), (4, 1024, 3, 2),
           (16, 1024, 3, 8), (8, 2048, 2, 8), (32, 256, 3, 4), (4, 4096, 2, 4), (2, 4096, 2, 4), (1, 4096, 2, 2),
           (16, 2048, 2, 8), (8, 512, 4, 2), (4, 512, 4, 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "explore_quant_int8.json"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sol = bench.solutions()["int8_gemv"]
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "flush": "read", "rows": []}
    gen = torch.Generator().manual_seed(0)
    for n, k in measure.SHAPES:
        d = measure.quantized_weights(n, k, 128, gen)
        x = torch.randn(1, k, generator=gen).to(torch.bfloat16).cuda()
        q8, s8 = d["q8"], d["s8"]
        ref = kernels.w8a16_gemv(x, q8, s8).float()
        fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"]), "lesson kernel": lambda: kernels.w8a16_gemv(x, q8, s8)}
        err = {}
        for bn, bk, st, w in CONFIGS:
            name = f"solution BN{bn} BK{bk} S{st} w{w}"
            fn = (lambda bn=bn, bk=bk, st=st, w=w: sol(x, q8, s8, BLOCK_N=bn, BLOCK_K=bk, STAGES=st, num_warps=w))
            try:
                err[name] = float((fn().float() - ref).abs().max() / ref.abs().max())
                fns[name] = fn
            except Exception as exc:
                err[name] = f"error: {str(exc)[:200]}"
        us = {nm: r.median_ms * 1e3 for nm, r in interleaved(fns, rounds=args.rounds, flush_l2="read").items()}
        bf = us["bf16 cuBLAS"]
        res["rows"].append({"shape": [n, k], "us": us, "x_bf16": {nm: bf / v for nm, v in us.items()},
                            "rel_diff_vs_lesson": err})
        print(f"{n}x{k}: bf16 {bf:.1f} us", flush=True)
        for nm, v in sorted(us.items(), key=lambda i: i[1])[:10]:
            print(f"   {nm:34s} {v:7.1f} us  {bf / v:5.2f}x", flush=True)
    mins = {}
    for row in res["rows"]:
        for nm, r in row["x_bf16"].items():
            mins[nm] = min(mins.get(nm, 9.9), r)
    res["min_ratio_over_shapes"] = dict(sorted(mins.items(), key=lambda i: -i[1]))
    print("min over the three shapes:")
    for nm, r in list(res["min_ratio_over_shapes"].items())[:10]:
        print(f"   {nm:34s} {r:5.2f}x")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
