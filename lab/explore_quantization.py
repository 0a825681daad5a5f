#!/usr/bin/env python3
"""Exploration behind issue #15 (lesson 07, quantization): one GPU run that checks the lesson's W8A16/W4A16 kernels
on the GPU, tunes their block sizes over a small grid, and measures them against their peers with the best
configs. Uses the lesson's code as it is (gpucourse/quant/kernels.py, gpucourse/lessons/l07_quantization/measure.py);
block sizes are passed per call, so nothing here is a copy of a kernel.

  python3 lab/explore_quantization.py [--skip-tune] [--grade]

Steps (each row printed as one JSON line and saved as it goes):
  check    the kernels (rows and dot paths) against float64 on the GPU, M = 1, 5, 16, 64; int4 groups 32/64/128
  tune     M = 1, rows path: BLOCK_N x BLOCK_K x num_warps on 8192x8192, 14336x4096, 4096x14336 (int8, int4 g128);
           M = 16, dot path: BLOCK_N x BLOCK_K x num_warps x num_stages on 8192x8192
  crossover rows against dot path for M = 1..16
  peers    M = 1, the three shapes: bf16 cuBLAS, ours, torch eager and torch.compile dequant+matmul, torchao
  sweep    M = 1..256 on 8192x8192
  mlp      the MLP block's decode step (hidden 4096, intermediate 14336), bf16 / int8 / int4
  grade    (--grade) the known submissions of the lesson's exercises, graded on this GPU

Writes $OUT/explore_quantization.json (where $OUT is set) and lab/results/h100-explore-quantization.json.
"""
import argparse
import datetime
import functools
import json
import os
import subprocess
import sys
import time

import gpucourse  # noqa: F401  (first: selects the mode before triton loads)
import torch
import triton

from gpucourse.lessons.l07_quantization import bench as bench07
from gpucourse.lessons.l07_quantization import measure
from gpucourse.quant import kernels, packing, symmetric
from gpucourse.timing import bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TUNE_KW = {"warmup_ms": 10, "rep_ms": 40}


def commit():
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None
    except OSError:
        return None


class Recorder:
    def __init__(self):
        self.paths = [os.path.join(HERE, "results", "h100-explore-quantization.json")]
        if os.environ.get("OUT"):
            self.paths.append(os.path.join(os.environ["OUT"], "explore_quantization.json"))
        self.doc = {"commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "steps": {}}

    def save(self, step, rec):
        print(json.dumps({"step": step, **rec}, default=str), flush=True)
        self.doc["steps"].setdefault(step, []).append(rec)
        for p in self.paths:
            with open(p, "w") as f:
                json.dump(self.doc, f, indent=1, default=str)


def check(rec):
    gen = torch.Generator().manual_seed(0)
    for (m, n, k) in [(1, 4099, 4096), (5, 77, 1000), (16, 1000, 384), (64, 300, 768)]:
        w = torch.randn(n, k, generator=gen).cuda()
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        q8, s8 = symmetric.quantize(w, 8, "channel")
        ref = kernels.reference_gemv(x, symmetric.dequantize(q8, s8)).float()
        for rows in (True, False):
            y = kernels.w8a16_gemv(x, q8, s8, rows=rows).float()
            rec.save("check", {"kernel": "int8", "m": m, "n": n, "k": k, "rows": rows,
                               "max_err_over_max": float((y - ref).abs().max() / ref.abs().max())})
        for g in (32, 64, 128):
            if k % g:
                continue
            q4, s4 = symmetric.quantize(w, 4, "group", g)
            p = packing.pack_int4(q4)
            assert torch.equal(packing.unpack_int4(p), q4)
            ref4 = kernels.reference_gemv(x, symmetric.dequantize(q4, s4, g)).float()
            for rows in (True, False):
                y = kernels.w4a16_gemv(x, p, s4, g, rows=rows).float()
                rec.save("check", {"kernel": "int4", "group": g, "m": m, "n": n, "k": k, "rows": rows,
                                   "max_err_over_max": float((y - ref4).abs().max() / ref4.abs().max())})


def tune(rec):
    best = {}
    gen = torch.Generator().manual_seed(1)
    for n, k in measure.SHAPES:
        d = measure.quantized_weights(n, k, 128, gen)
        x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
        bf = bench(torch.nn.functional.linear, x, d["w"], **TUNE_KW).median_ms * 1e3
        for kind in ("int8", "int4"):
            for bn in (4, 8, 16, 32):
                for bk in (256, 512, 1024):
                    for warps in (4, 8):
                        cfg = dict(rows=True, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
                        try:
                            if kind == "int8":
                                fn = lambda: kernels.w8a16_gemv(x, d["q8"], d["s8"], **cfg)  # noqa: E731
                            else:
                                fn = lambda: kernels.w4a16_gemv(x, d["packed"], d["s4"], 128, **cfg)  # noqa: E731
                            us = bench(fn, **TUNE_KW).median_ms * 1e3
                        except Exception as exc:
                            rec.save("tune_m1", {"kind": kind, "shape": [n, k], **cfg, "error": repr(exc)[:200]})
                            continue
                        rec.save("tune_m1", {"kind": kind, "shape": [n, k], **cfg, "us": us, "bf16_us": bf,
                                             "speedup": bf / us})
                        key = (kind, bn, bk, warps)
                        best.setdefault(key, []).append(bf / us)
        d = None  # frees the weights (the timed lambdas above name d)
    # the config with the best worst-case speed-up over the three shapes
    for kind in ("int8", "int4"):
        cands = {key: min(v) for key, v in best.items() if key[0] == kind and len(v) == len(measure.SHAPES)}
        top = max(cands, key=cands.get)
        rec.save("tune_m1_best", {"kind": kind, "BLOCK_N": top[1], "BLOCK_K": top[2], "num_warps": top[3],
                                  "worst_speedup": cands[top],
                                  "top5": sorted(((v, k[1:]) for k, v in cands.items()), reverse=True)[:5]})
        cfg = kernels.CONFIGS[f"{'w8' if kind == 'int8' else 'w4'}_rows"]
        cfg.update(BLOCK_N=top[1], BLOCK_K=top[2], num_warps=top[3])
    # M = 16, dot path, square shape
    d = measure.quantized_weights(8192, 8192, 128, gen)
    x = torch.randn(16, 8192, device="cuda").to(torch.bfloat16)
    bf = bench(torch.nn.functional.linear, x, d["w"], **TUNE_KW).median_ms * 1e3
    for kind in ("int8", "int4"):
        results = {}
        for bn in (32, 64, 128):
            for bk in ((64, 128, 256) if kind == "int8" else (None,)):
                for warps in ((4,) if kind == "int8" else (4, 8)):
                    for stages in (3, 4):
                        cfg = dict(rows=False, BLOCK_M=16, BLOCK_N=bn, num_warps=warps, num_stages=stages)
                        if bk:
                            cfg["BLOCK_K"] = bk
                        try:
                            if kind == "int8":
                                fn = lambda: kernels.w8a16_gemv(x, d["q8"], d["s8"], **cfg)  # noqa: E731
                            else:
                                fn = lambda: kernels.w4a16_gemv(x, d["packed"], d["s4"], 128, **cfg)  # noqa: E731
                            us = bench(fn, **TUNE_KW).median_ms * 1e3
                        except Exception as exc:
                            rec.save("tune_m16", {"kind": kind, **cfg, "error": repr(exc)[:200]})
                            continue
                        rec.save("tune_m16", {"kind": kind, **cfg, "us": us, "bf16_us": bf, "speedup": bf / us})
                        results[(bn, bk, warps, stages)] = us
        top = min(results, key=results.get)
        rec.save("tune_m16_best", {"kind": kind, "BLOCK_N": top[0], "BLOCK_K": top[1], "num_warps": top[2],
                                   "num_stages": top[3], "us": results[top], "bf16_us": bf})
        cfg = kernels.CONFIGS[f"{'w8' if kind == 'int8' else 'w4'}_dot"]
        cfg.update(BLOCK_N=top[0], num_warps=top[2], num_stages=top[3])
        if top[1]:
            cfg["BLOCK_K"] = top[1]
    d = None  # frees the weights (the timed lambdas above name d)


def crossover(rec):
    d = measure.quantized_weights(8192, 8192, 128, torch.Generator().manual_seed(3))
    for m in (1, 2, 3, 4, 6, 8, 12, 16):
        x = torch.randn(m, 8192, device="cuda").to(torch.bfloat16)
        row = {"m": m}
        for rows in (True, False):
            row[f"int8_{'rows' if rows else 'dot'}_us"] = bench(
                lambda: kernels.w8a16_gemv(x, d["q8"], d["s8"], rows=rows), **TUNE_KW).median_ms * 1e3
            row[f"int4_{'rows' if rows else 'dot'}_us"] = bench(
                lambda: kernels.w4a16_gemv(x, d["packed"], d["s4"], 128, rows=rows), **TUNE_KW).median_ms * 1e3
        row["bf16_us"] = bench(torch.nn.functional.linear, x, d["w"], **TUNE_KW).median_ms * 1e3
        rec.save("crossover", row)
    d = None  # frees the weights (the timed lambdas above name d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-tune", action="store_true")
    ap.add_argument("--grade", action="store_true")
    args = ap.parse_args()
    rec = Recorder()
    t0 = time.perf_counter()
    check(rec)
    print(f"[check {time.perf_counter() - t0:.0f} s]", flush=True)
    if not args.skip_tune:
        tune(rec)
        print(f"[tune {time.perf_counter() - t0:.0f} s] configs now {kernels.CONFIGS}", flush=True)
        crossover(rec)
    rec.doc["configs_used"] = json.loads(json.dumps(kernels.CONFIGS))
    # The workbook's solutions, with the rows path's best block sizes (their structure is the rows path's).
    sol = bench07.solutions()
    c8, c4 = kernels.CONFIGS["w8_rows"], kernels.CONFIGS["w4_rows"]
    int8_sol = functools.partial(sol["int8_gemv"], BLOCK_N=c8["BLOCK_N"], BLOCK_K=c8["BLOCK_K"],
                                 num_warps=c8["num_warps"])
    int4_sol = functools.partial(sol["int4_gemv"], BLOCK_N=c4["BLOCK_N"], BLOCK_K=c4["BLOCK_K"],
                                 num_warps=c4["num_warps"])
    res = measure.peers(int8_fn=int8_sol, int4_fn=int4_sol,
                        extra={"int8 (lesson kernel)": kernels.w8a16_gemv, "int4 (lesson kernel)": kernels.w4a16_gemv})
    res["targets"] = bench07.gemv_targets(res)
    rec.save("peers", res)
    print(f"[peers {time.perf_counter() - t0:.0f} s]", flush=True)
    res = measure.batch_sweep()
    res["targets"] = bench07.sweep_targets(res)
    rec.save("sweep", res)
    res = measure.mlp_decode()
    res["targets"] = bench07.mlp_targets(res)
    rec.save("mlp", res)
    print(f"[sweep+mlp {time.perf_counter() - t0:.0f} s]", flush=True)
    if args.grade:
        for ex in ("quantize_per_channel", "pack_int4", "unpack_int4", "int8_gemv", "int4_gemv"):
            folder = os.path.join("tests", "submissions", ex)
            subs = sorted(os.path.join(folder, f) for f in os.listdir(os.path.join(ROOT, folder))
                          if f.endswith(".py") and f != "expected.py")
            out = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", ex, *subs, "--jobs", "4",
                                  "--timeout", "120", "--json", "/tmp/grade.json"], cwd=ROOT, capture_output=True,
                                 text=True)
            try:
                with open("/tmp/grade.json") as f:
                    results = json.load(f)["results"]
                rows = [{"submission": r["submission"], "status": r["status"], "message": r["message"][:300],
                         "failed_cases": [c["name"] for c in r["checks"] if not c["passed"]], "flags": r["flags"]}
                        for r in results]
            except Exception as exc:
                rows = [{"error": repr(exc), "stdout": out.stdout[-2000:], "stderr": out.stderr[-2000:]}]
            rec.save("grade", {"exercise": ex, "results": rows})
        print(f"[grade {time.perf_counter() - t0:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
