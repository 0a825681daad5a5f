#!/usr/bin/env python3
"""Exploration behind issue #15, eleventh round: x reordered into planes before the int4 GEMV.

Round ten (explore_quant_access.py, ncu) found the int4 rows kernel issue-bound, not memory-bound: 160 registers,
17% occupancy, an instruction issued every 5.3 cycles per warp, 38% of DRAM bandwidth; a kernel that only reads the
same words in the same pattern takes 15 µs. Under Triton 3.6 (the H100's) the kernel's x values reach the weights'
layout only through shared memory, because x[8w + j] is a stride-8 load and Triton lays it out apart from the
weights. Here x is first rewritten as 8 planes of float32 (plane j holds x[8w + j]), so every load in the GEMV's
loop is contiguous along the words and shares their layout: compiled for sm_90 with Triton 3.6 on the CPU machine
the loop has 4.2-4.9 SASS instructions per weight and almost no shared memory (3.8-4.0 with Triton 3.9, none).
Each nibble is also put in the mantissa of 2**(23 - P) (P: its bit), whose unit is 1, so x needs no 2**-P scaling.

Times, per shape at M = 1, L2 flushed by a read: bf16 F.linear; the workbook's int4_gemv as committed; the planes
kernel alone (x already in planes); the reorder alone; both (what a caller pays).

    python3 lab/explore_quant_planes.py --out $OUT/h100-explore-quant-planes.json
"""
import argparse
import json
import platform
import time

import gpucourse  # noqa: F401  (before triton: selects the mode)
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from gpucourse import device
from gpucourse.lessons.l07_quantization import bench, measure
from gpucourse.quant import packing
from gpucourse.timing import interleaved

MAGIC = 0x4B000000


@triton.jit
def fld(v, P: tl.constexpr, MAGIC):
    """The nibble of v at bit P (offset binary, P <= 19) as float32 q: ORed into the mantissa of 2**(23 - P), whose
    last place is then worth 2**(23-P) * 2**-23 * 2**P = 1."""
    MASK: tl.constexpr = 15 << P
    C: tl.constexpr = float((1 << (23 - P)) + 8)
    return ((v & MASK) | (MAGIC - (P << 23))).to(tl.float32, bitcast=True) - C


@triton.jit
def planes_kernel(x_ptr, out_ptr, KW, stride_xm, BLOCK: tl.constexpr):
    m = tl.program_id(1)
    w = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = (w < KW)[:, None]
    j = tl.arange(0, 8)[None, :]
    xx = tl.load(x_ptr + m * stride_xm + 8 * w[:, None] + j, mask=ok, other=0.0)
    tl.store(out_ptr + m * 8 * KW + j * KW + w[:, None], xx.to(tl.float32), mask=ok)


def x_planes(x, block=256):
    m, k = x.shape
    kw = k // 8
    out = torch.empty(m, 8, kw, dtype=torch.float32, device=x.device)
    planes_kernel[(triton.cdiv(kw, block), m)](x, out, kw, x.stride(0), BLOCK=block, num_warps=4)
    return out


@triton.jit
def planes_step(u, s, xp, ww, k_ok, KW, MAGIC):
    """One step's contribution: words u (BN, BW) with scales s, x planes at words ww."""
    lo = u ^ -2004318072  # 0x88888888: each nibble q + 8
    hi = lo >> 12
    part = fld(lo, 0, MAGIC) * tl.load(xp + ww, mask=k_ok, other=0.0)[None, :]
    part += fld(lo, 4, MAGIC) * tl.load(xp + KW + ww, mask=k_ok, other=0.0)[None, :]
    part += fld(lo, 8, MAGIC) * tl.load(xp + 2 * KW + ww, mask=k_ok, other=0.0)[None, :]
    part += fld(lo, 12, MAGIC) * tl.load(xp + 3 * KW + ww, mask=k_ok, other=0.0)[None, :]
    part += fld(lo, 16, MAGIC) * tl.load(xp + 4 * KW + ww, mask=k_ok, other=0.0)[None, :]
    part += fld(hi, 8, MAGIC) * tl.load(xp + 5 * KW + ww, mask=k_ok, other=0.0)[None, :]
    part += fld(hi, 12, MAGIC) * tl.load(xp + 6 * KW + ww, mask=k_ok, other=0.0)[None, :]
    part += fld(hi, 16, MAGIC) * tl.load(xp + 7 * KW + ww, mask=k_ok, other=0.0)[None, :]
    return part * s


@triton.jit
def w4_planes_kernel(xp_ptr, w_ptr, s_ptr, out_ptr, N, KW, stride_wn, stride_sn, stride_om, MAGIC,
                     GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, PREFETCH: tl.constexpr):
    """PREFETCH 0: load and use each step; 1: the next step's words and scales loaded before this step's math
    (a register double buffer); 2: Triton's pipeliner (tl.range num_stages=3: copies through shared memory)."""
    WPG: tl.constexpr = GROUP // 8
    m = tl.program_id(0)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rw = tl.arange(0, BLOCK_W)
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
    s_rows = s_ptr + rn.to(tl.int64)[:, None] * stride_sn
    xp = xp_ptr + m * 8 * KW
    n_ok = (rn < N)[:, None]
    acc = tl.zeros((BLOCK_N, BLOCK_W), dtype=tl.float32)
    if PREFETCH == 1:
        ww = rw
        k_ok = ww < KW
        u = tl.load(w_rows + ww[None, :], mask=n_ok & k_ok[None, :], other=0)
        s = tl.load(s_rows + (ww // WPG)[None, :], mask=n_ok & k_ok[None, :], other=0.0)
        for w0 in range(0, KW, BLOCK_W):
            wn = ww + BLOCK_W
            n_k_ok = wn < KW
            u_next = tl.load(w_rows + wn[None, :], mask=n_ok & n_k_ok[None, :], other=0)
            s_next = tl.load(s_rows + (wn // WPG)[None, :], mask=n_ok & n_k_ok[None, :], other=0.0)
            acc += planes_step(u, s, xp, ww, k_ok, KW, MAGIC)
            u, s, ww, k_ok = u_next, s_next, wn, n_k_ok
    elif PREFETCH == 2:
        for w0 in tl.range(0, KW, BLOCK_W, num_stages=3):
            ww = w0 + rw
            k_ok = ww < KW
            u = tl.load(w_rows + ww[None, :], mask=n_ok & k_ok[None, :], other=0)
            s = tl.load(s_rows + (ww // WPG)[None, :], mask=n_ok & k_ok[None, :], other=0.0)
            acc += planes_step(u, s, xp, ww, k_ok, KW, MAGIC)
    else:
        for w0 in range(0, KW, BLOCK_W):
            ww = w0 + rw
            k_ok = ww < KW
            u = tl.load(w_rows + ww[None, :], mask=n_ok & k_ok[None, :], other=0)
            s = tl.load(s_rows + (ww // WPG)[None, :], mask=n_ok & k_ok[None, :], other=0.0)
            acc += planes_step(u, s, xp, ww, k_ok, KW, MAGIC)
    tl.store(out_ptr + m * stride_om + rn, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=rn < N)


def w4_planes(xp, packed, scales, group, bn, bw, warps, pre=0, m=1):
    n = packed.shape[0]
    words = packed.view(torch.int32)
    kw = words.shape[1]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=packed.device)
    w4_planes_kernel[(m, triton.cdiv(n, bn))](xp, words, scales, out, n, kw, words.stride(0), scales.stride(0),
                                              out.stride(0), MAGIC, GROUP=group, BLOCK_N=bn, BLOCK_W=bw,
                                              PREFETCH=pre, num_warps=warps)
    return out


CONFIGS = [(4, 256, 2, 0), (4, 512, 4, 0), (2, 256, 2, 0), (4, 128, 1, 0), (4, 256, 2, 1), (4, 512, 4, 1),
           (2, 256, 2, 1), (4, 128, 1, 1), (2, 512, 4, 1), (8, 512, 4, 1), (4, 256, 2, 2), (4, 512, 4, 2),
           (2, 256, 2, 2), (2, 512, 4, 0), (1, 512, 4, 1), (1, 1024, 8, 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="h100-explore-quant-planes.json")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    dev = device.torch_device()
    shapes, quick, configs = measure.SHAPES, {}, CONFIGS
    if args.quick:
        shapes, quick = ((64, 512), (40, 384)), dict(measure.QUICK)
        configs = [(4, 32, 1, 0), (8, 64, 2, 1), (4, 32, 1, 2)]
    res = {"device": torch.cuda.get_device_name() if device.on_gpu() else "cpu", "torch": torch.__version__,
           "triton": triton.__version__, "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"),
           "rows": []}
    sol = bench.solutions()
    gen = torch.Generator().manual_seed(0)
    for n, k in shapes:
        d = measure.quantized_weights(n, k, 128, gen)
        x = torch.randn(1, k, generator=gen).to(torch.bfloat16).to(dev)
        p4, s4 = d["packed"], d["s4"]
        xp = x_planes(x)
        fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"]),
               "int4 workbook (before)": lambda: sol["int4_gemv"](x, p4, s4, 128),
               "x planes alone": lambda: x_planes(x)}
        for c in configs:
            tag = f"BN{c[0]} BW{c[1]} w{c[2]} pre{c[3]}"
            fns[f"planes GEMV alone {tag}"] = lambda c=c: w4_planes(xp, p4, s4, 128, *c)
            fns[f"planes + GEMV {tag}"] = lambda c=c: w4_planes(x_planes(x), p4, s4, 128, *c)
        ref = (x.double() @ (packing.unpack_int4_torch(p4).double() * s4.double().repeat_interleave(128, 1)).T).float()
        err = {}
        for name, fn in fns.items():
            if "GEMV" in name or "workbook" in name:
                err[name] = float((fn().float() - ref).abs().max() / ref.abs().max())
        timed = interleaved(fns, rounds=3, flush_l2="read", **quick)
        us = {name: r.median_ms * 1e3 for name, r in timed.items()}
        bf = us["bf16 cuBLAS"]
        res["rows"].append({"shape": [n, k], "us": us, "x_bf16": {nm: bf / v for nm, v in us.items()},
                            "max_rel_err": err})
        print(f"{n}x{k}: bf16 {bf:.1f} us", flush=True)
        for nm, v in sorted(us.items(), key=lambda i: i[1]):
            print(f"   {nm:36s} {v:7.1f} us  {bf / v:5.2f}x  err {err.get(nm, 0):.1e}", flush=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
