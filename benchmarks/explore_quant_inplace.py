#!/usr/bin/env python3
"""Exploration behind issue #15, ninth round: the M = 1 GEMVs with no shared memory in their loop.

The kernels are the lesson's (``kernels.w8a16_rows_kernel``, ``kernels.w4a16_rows_kernel``): weights read as int32
words, every field taken out in place (AND, OR into the mantissa of 2**23, one subtraction: exact), x loaded as a
(words, values per word) tile and split in registers, and every load given the layout of the accumulator, so that
Triton reshuffles nothing through shared memory. Compiled for sm_90 on the CPU machine (``cuobjdump -sass``), the
loop holds no LDS/STS and 4.3-4.7 instructions per weight, against 9.1 per weight that ncu counted in the round-four
kernel, which moved its x through shared memory every step.

This script times, at M = 1 on the lesson's three shapes, one run each: bf16 ``F.linear``, the workbook's solutions
as committed (the "before"), and the new kernels at several (BLOCK_N, BLOCK_W, num_warps); then the batch sizes
where the rows path stops paying against the tensor-core path; then the MLP block's decode step with the fastest
configuration. Every timing reads its weights from device memory (L2 flushed by a read, as the lesson does).

    python3 benchmarks/explore_quant_inplace.py --out $OUT/h100-explore-quant-inplace.json

Its first H100 run (h100-explore-quant-inplace.json) timed the kernels of that description: no faster than the
committed workbook (int4 1.71x, int8 1.56x bf16 at best), because Triton 3.6 compiles the in-register split of
x through shared memory (see explore_quant_access.py and explore_quant_planes.py for what followed). Its second
run (h100-explore-quant-inplace-planes.json) times the lesson's kernels after that: x rewritten in planes first.
A record of those two runs: the lesson's kernels have moved on since (the int8 planes kernel its INT8 configurations
time was removed in 486f4f6, slower than the byte kernel), so rerun it at ba4235c.
"""
import argparse
import json
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpucourse  # noqa: E402,F401  (before triton: selects the mode)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from gpucourse import device  # noqa: E402
from gpucourse.lessons.l07_quantization import bench, kernels, measure, packing  # noqa: E402
from gpucourse.timing import interleaved  # noqa: E402

INT8 = [(4, 256, 2), (4, 512, 4), (2, 256, 2), (4, 128, 1), (8, 256, 2), (2, 512, 4)]
INT4 = [(4, 256, 2), (4, 512, 4), (2, 256, 2), (4, 128, 1), (8, 256, 2), (2, 512, 4)]
FLUSH = {"flush_l2": "read"}


def cfg_name(kind, c):
    return f"{kind} new BN{c[0]} BW{c[1]} w{c[2]}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="h100-explore-quant-inplace.json")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, the code path only (CPU mode)")
    args = ap.parse_args()
    dev = device.torch_device()
    shapes, big, quick = measure.SHAPES, 8192, {}
    if args.quick:
        shapes, big, quick = ((64, 512), (96, 256)), 512, dict(measure.QUICK)
        INT8[:], INT4[:] = INT8[:2], INT4[:2]
    res = {"device": torch.cuda.get_device_name() if device.on_gpu() else "cpu", "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "rows": []}

    def save():
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    sol = bench.solutions()
    gen = torch.Generator().manual_seed(0)
    for n, k in shapes:
        d = measure.quantized_weights(n, k, 128, gen)
        x = torch.randn(1, k, generator=gen).to(torch.bfloat16).to(dev)
        w, q8, s8, p4, s4 = d["w"], d["q8"], d["s8"], d["packed"], d["s4"]
        fns = {"bf16 cuBLAS": lambda: F.linear(x, w),
               "int8 workbook (before)": lambda: sol["int8_gemv"](x, q8, s8),
               "int4 workbook (before)": lambda: sol["int4_gemv"](x, p4, s4, 128)}
        for c in INT8:
            cfg = dict(rows=True, BLOCK_N=c[0], BLOCK_W=c[1], num_warps=c[2])
            fns[cfg_name("int8", c)] = lambda cfg=cfg: kernels.w8a16_gemv(x, q8, s8, **cfg)
        for c in INT4:
            cfg = dict(rows=True, BLOCK_N=c[0], BLOCK_W=c[1], num_warps=c[2])
            fns[cfg_name("int4", c)] = lambda cfg=cfg: kernels.w4a16_gemv(x, p4, s4, 128, **cfg)
        ref8 = kernels.reference_gemv(x, q8.float() * s8[:, None]).float()
        ref4 = kernels.reference_gemv(x, packing.unpack_int4_torch(p4).float() * s4.repeat_interleave(128, 1)).float()
        err = {}
        for name, fn in fns.items():
            if name.startswith("int"):
                ref = ref8 if name.startswith("int8") else ref4
                err[name] = float((fn().float() - ref).abs().max() / ref.abs().max())
        t0 = time.time()
        timed = interleaved(fns, rounds=3, **FLUSH, **quick)
        us = {name: r.median_ms * 1e3 for name, r in timed.items()}
        bf = us["bf16 cuBLAS"]
        row = {"shape": [n, k], "us": us, "x_bf16": {nm: bf / v for nm, v in us.items()}, "max_rel_err": err,
               "seconds": time.time() - t0}
        res["rows"].append(row)
        save()
        print(f"{n}x{k}: bf16 {bf:.1f} us", flush=True)
        for nm, v in sorted(us.items(), key=lambda i: i[1]):
            print(f"   {nm:32s} {v:7.1f} us  {bf / v:5.2f}x  err {err.get(nm, 0):.1e}", flush=True)
        del d, w, q8, s8, p4, s4, fns
        if device.on_gpu():
            torch.cuda.empty_cache()

    # the fastest configuration over the three shapes (geometric mean of the speed-ups)
    best = {}
    for kind, cands in (("int8", INT8), ("int4", INT4)):
        score = {c: math.exp(sum(math.log(r["x_bf16"][cfg_name(kind, c)]) for r in res["rows"]) / len(res["rows"]))
                 for c in cands}
        best[kind] = max(score, key=score.get)
        res[f"best_{kind}"] = {"config": best[kind], "geomean_x_bf16": score[best[kind]],
                               "scores": {cfg_name(kind, c): s for c, s in score.items()}}
    print("best", best, flush=True)
    kernels.CONFIGS["w8_rows"] = dict(BLOCK_N=best["int8"][0], BLOCK_W=best["int8"][1], num_warps=best["int8"][2])
    kernels.CONFIGS["w4_rows"] = dict(BLOCK_N=best["int4"][0], BLOCK_W=best["int4"][1], num_warps=best["int4"][2])
    save()

    # where the rows path stops paying: M = 1..16, rows against the tensor-core path, 8192 x 8192
    d = measure.quantized_weights(big, big, 128, torch.Generator().manual_seed(1))
    sweep = {"ms": [1, 2, 3, 4, 6, 8, 16], "us": {}}
    for m in sweep["ms"]:
        x = torch.randn(m, big).to(torch.bfloat16).to(dev)
        fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"]),
               "int8 rows": lambda: kernels.w8a16_gemv(x, d["q8"], d["s8"], rows=True),
               "int8 dot": lambda: kernels.w8a16_gemv(x, d["q8"], d["s8"], rows=False),
               "int4 rows": lambda: kernels.w4a16_gemv(x, d["packed"], d["s4"], 128, rows=True),
               "int4 dot": lambda: kernels.w4a16_gemv(x, d["packed"], d["s4"], 128, rows=False)}
        timed = interleaved(fns, rounds=2, **FLUSH, **quick)
        for name, r in timed.items():
            sweep["us"].setdefault(name, []).append(r.median_ms * 1e3)
        print(f"M={m}: " + ", ".join(f"{nm} {r.median_ms * 1e3:.1f}" for nm, r in timed.items()), flush=True)
    res["m_sweep"] = sweep
    save()
    del d

    # the MLP block's decode step with the lesson's kernels (now the best configuration)
    res["mlp_decode"] = measure.mlp_decode(**(dict(hidden=256, inter=512, bench_kw=quick) if args.quick else {}))
    u = res["mlp_decode"]["us"]
    print("MLP decode us", u, "int4 x", u["bf16"] / u["int4"], "int8 x", u["bf16"] / u["int8"], flush=True)
    save()


if __name__ == "__main__":
    main()
