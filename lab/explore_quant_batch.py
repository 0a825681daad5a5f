#!/usr/bin/env python3
"""Exploration behind issue #15, thirteenth round: the tensor-core int4 kernel past M = 1, tile-major weights, and
int8 tiles for M > 16.

Lesson 07's batch sweep (results/h100.json, quant07_batch_sweep) showed the int4 line losing to bf16 from M = 2:
the tc kernel (weights as wgmma's A operand, x^T as B) ran only at M = 1, and M = 2..256 fell to the rows and dot
kernels (36.5 µs at M = 2, 1644 µs at M = 256, against bf16's 50-55 µs). Its B operand has room for 16 columns, and
kernels.w4a16_tc_kernel now takes x in blocks of MX rows (a third grid axis), so the same kernel serves any M.
Two more questions:

* tile-major weights (kernels.tile_major): each of a program's steps reads one contiguous run (BLOCK_N rows x one
  group) instead of BLOCK_N pieces of 64 bytes, one per row, and its scales as one run instead of BLOCK_N 4-byte
  loads; does the M = 1 time move towards the read floor (15.0-15.2 µs for the 8192 x 8192 int4 bytes alone,
  results/h100-explore-quant-access.json)?
* int8 at M > 16: the dot path's 16-row tiles read the weights once per 16 rows (35 µs at M = 32, 224 µs at 256);
  which tile sizes keep it near bf16 cuBLAS?

Every time is a median of interleaved rounds with L2 flushed by a read (gpucourse.timing), bf16 cuBLAS in the same
rounds.

    python3 lab/explore_quant_batch.py [--parts check,m1,sweep,mlp]   (writes $OUT/explore_quant_batch.json)
"""
import argparse
import json
import os
import platform
import time

import torch
import torch.nn.functional as F
import triton

from gpucourse.lessons.l07_quantization import measure
from gpucourse.quant import kernels, packing
from gpucourse.timing import interleaved

GS = 128
_TILED = {}  # (packed, scales, block) -> TiledInt4, made once per weight as a model loader would


def tiled_fn(block=128, **cfg):
    """An ``int4_fn(x, packed, scales, group_size)`` on tile-major weights, made on first use and kept."""
    def fn(x, p, s, gs):
        key = (p.data_ptr(), s.data_ptr(), block)
        if key not in _TILED:
            _TILED[key] = (p, s, kernels.tile_major(p, s, gs, block))
        return kernels.w4a16_tiled(x, _TILED[key][2], **cfg)
    return fn


def int4_tc(**cfg):
    return lambda x, p, s, gs: kernels.w4a16_gemv(x, p, s, gs, tc=True, **cfg)


def int8_cfg(**cfg):
    return lambda x, q, s: kernels.w8a16_gemv(x, q, s, **cfg)


def m1_variants():
    out = {"tc rows-layout (default)": int4_tc()}
    for bn, tb in ((128, 128), (64, 64), (64, 128), (256, 256)):
        for ns in ((2, 3, 4) if bn == 128 else (3,)):
            for t in ((2, 4, 8) if bn <= 128 else (2, 4)):
                out[f"tiled TB{tb} BN{bn} ns{ns} T{t}"] = tiled_fn(tb, BLOCK_N=bn, NSTAGE=ns, CTAS_PER_SM=t)
    return out


def wide_variants(m):
    out = {"int4 before (rows/dot)": lambda x, p, s, gs: kernels.w4a16_gemv(x, p, s, gs, tc=False),
           "int4 tc (default cfg)": int4_tc(), "int4 tiled (default cfg)": tiled_fn(128)}
    if m > 16:
        for mx, bn, w, t in ((32, 128, 4, 2), (64, 64, 4, 2), (64, 128, 8, 2), (64, 128, 4, 2), (128, 64, 4, 1),
                             (128, 128, 8, 1), (128, 64, 8, 2)):
            if mx <= max(32, triton.next_power_of_2(m)):
                out[f"int4 tiled MX{mx} BN{bn} w{w} T{t}"] = tiled_fn(128, MX=mx, BLOCK_N=bn, num_warps=w,
                                                                      CTAS_PER_SM=t)
    return out


def int8_variants(m):
    out = {"int8 (default cfg)": int8_cfg()}
    if m > 16:
        out["int8 before (BM16 dot)"] = int8_cfg(rows=False, BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4,
                                                 num_stages=4)
        for bm, bn, bk, w, st in ((32, 64, 256, 4, 4), (64, 64, 128, 4, 4), (64, 128, 128, 8, 4),
                                  (128, 64, 128, 8, 3), (128, 128, 64, 8, 3), (64, 256, 64, 8, 3)):
            if bm <= max(32, triton.next_power_of_2(m)):
                out[f"int8 BM{bm} BN{bn} BK{bk} w{w} s{st}"] = int8_cfg(rows=False, BLOCK_M=bm, BLOCK_N=bn,
                                                                         BLOCK_K=bk, num_warps=w, num_stages=st)
    return out


def rel_err(y, ref):
    return float((y.double() - ref).abs().max() / ref.abs().max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "explore_quant_batch.json"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", default="check,m1,sweep,mlp")
    args = ap.parse_args()
    parts = args.parts.split(",")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "flush": "read",
           "checks": [], "m1": [], "sweep": [], "mlp": []}

    def save():
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    gen = torch.Generator().manual_seed(0)
    if "check" in parts:  # the inline-PTX kernel against the exact product, every variant, M past one block
        for m, n, k, gs in ((1, 4099, 4096, 128), (5, 300, 1024, 64), (40, 260, 2048, 128), (200, 130, 1024, 128),
                            (77, 1000, 512, 256)):
            d = measure.quantized_weights(n, k, gs, gen)
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
            w = packing.unpack_int4_torch(d["packed"]).double() * d["s4"].double().repeat_interleave(gs, 1)
            ref = x.double() @ w.T
            ref8 = x.double() @ (d["q8"].double() * d["s8"].double()[:, None]).T
            row = {"shape": [m, n, k, gs]}
            for name, fn in {**m1_variants(), **wide_variants(max(m, 17))}.items():
                try:
                    y = fn(x, d["packed"], d["s4"], gs)
                    row[name] = rel_err(y, ref)
                    if not torch.equal(y, fn(x, d["packed"], d["s4"], gs)):
                        row[name] = f"second call differs ({row[name]})"
                except Exception as exc:
                    row[name] = f"error: {str(exc)[:300]}"
            for name, fn in int8_variants(max(m, 17)).items():
                row[name] = rel_err(fn(x, d["q8"], d["s8"]), ref8)
            res["checks"].append(row)
            bad = {k_: v for k_, v in row.items() if k_ != "shape" and (isinstance(v, str) or v > 8e-3)}
            print(f"check {row['shape']}: worst {max(v for v in row.values() if isinstance(v, float)):.2e}"
                  f"{'; BAD ' + json.dumps(bad) if bad else ''}", flush=True)
            save()
    if "m1" in parts:  # M = 1: the row layout against tile-major ones, on the lesson's shapes and the MLP's up
        for n, k in measure.SHAPES + ((28672, 4096),):
            d = measure.quantized_weights(n, k, GS, gen)
            x = torch.randn(1, k, generator=gen).to(torch.bfloat16).cuda()
            p4, s4 = d["packed"], d["s4"]
            y0 = kernels.w4a16_gemv(x, p4, s4, GS, tc=False).double()
            fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"])}
            err = {}
            for name, fn in m1_variants().items():
                err[name] = rel_err(fn(x, p4, s4, GS), y0)
                fns[name] = lambda fn=fn: fn(x, p4, s4, GS)
            us = {nm: r.median_ms * 1e3 for nm, r in interleaved(fns, rounds=args.rounds, flush_l2="read").items()}
            bf = us["bf16 cuBLAS"]
            res["m1"].append({"shape": [n, k], "us": us, "x_bf16": {nm: bf / v for nm, v in us.items()},
                              "rel_diff_vs_rows": err})
            print(f"M=1 {n}x{k}: bf16 {bf:.1f} us", flush=True)
            for nm, v in sorted(us.items(), key=lambda i: i[1])[:8]:
                print(f"   {nm:34s} {v:7.1f} us  {bf / v:5.2f}x", flush=True)
            print(f"   {'tc rows-layout (default)':34s} {us['tc rows-layout (default)']:7.1f} us", flush=True)
            _TILED.clear()
            save()
    if "sweep" in parts:  # 8192 x 8192, M = 1..256: int4 and int8 contenders against bf16 cuBLAS
        d = measure.quantized_weights(8192, 8192, GS, gen)
        for m in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            x = torch.randn(m, 8192, generator=gen).to(torch.bfloat16).cuda()
            fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"])}
            for name, fn in wide_variants(m).items():
                fns[name] = lambda fn=fn: fn(x, d["packed"], d["s4"], GS)
            for name, fn in int8_variants(m).items():
                fns[name] = lambda fn=fn: fn(x, d["q8"], d["s8"])
            for fn in fns.values():
                fn()
            us = {nm: r.median_ms * 1e3 for nm, r in interleaved(fns, rounds=2, flush_l2="read").items()}
            res["sweep"].append({"m": m, "us": us})
            bf = us["bf16 cuBLAS"]
            print(f"M={m}: bf16 {bf:.1f} us", flush=True)
            for nm, v in sorted(us.items(), key=lambda i: i[1]):
                print(f"   {nm:34s} {v:7.1f} us  {bf / v:5.2f}x", flush=True)
            save()
    if "mlp" in parts:  # the lesson's MLP block's decode step, with the row-layout and tile-major int4
        for label, fn in (("int4 tc rows-layout", None), ("int4 tiled TB128", tiled_fn(128)),
                          ("int4 tiled TB128 T8", tiled_fn(128, CTAS_PER_SM=8))):
            r = measure.mlp_decode(int4_fn=fn, rounds=args.rounds)
            r["int4_label"] = label
            res["mlp"].append(r)
            print(f"MLP {label}: " + ", ".join(f"{f} {v:.1f} us" for f, v in r["us"].items()) +
                  f"; int4 {r['us']['bf16'] / r['us']['int4']:.2f}x, int8 {r['us']['bf16'] / r['us']['int8']:.2f}x",
                  flush=True)
            _TILED.clear()
            save()
    save()


if __name__ == "__main__":
    main()
