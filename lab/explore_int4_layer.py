#!/usr/bin/env python3
"""Lesson 11 (issue #36): do int4 weights give the Triton layer (``fused_layer.triton_layer``) the 1.8x over bf16
that the compiled step's int4 (tinygemm, 1.59x) misses?

The int4 layer is the same six kernels with the GEMV reading lesson 07's int4 format (``gemv_int4_kernel`` below:
packed nibbles and a float32 scale per group of 128, unpacked with shifts, the norm, residual and SwiGLU fused as in
the bf16 GEMV); ``int4_gemv`` stands in for the lesson's ``fused_layer.gemv`` while the int4 steps run. On a GPU (Config.small, bf16, context 512): a sweep of the int4 GEMV's
block sizes on each of a layer's shapes against a copy of the same bytes, then tokens/s in CUDA graphs of the bf16
Triton layer, the int4 Triton layer (the sweep's best configurations), and the compiled int4 step (tinygemm) in the
same run, each int4 step's tokens against the int4 model's eager loop. Prints JSON; ``--out FILE`` too.
Usage: python lab/explore_int4_layer.py [--context 512] [--new 128] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import time

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch
import triton
import triton.language as tl

from gpucourse import timing
from gpucourse.lessons.l11_llm_decode import decode, floor, fused_layer, model
from gpucourse.lessons.l11_llm_decode.fused_layer import _gemv_store, _rms_rstd, _round

LESSON_GEMV = fused_layer.gemv


@triton.jit
def gemv_int4_kernel(X, P, S, OUT, RES, NORM_W, N, K, stride_p, stride_s, eps,
                     NORM: tl.constexpr, GATED: tl.constexpr, RESID: tl.constexpr, GROUP: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """:func:`gemv_kernel` on int4 weights in lesson 07's format: P (rows, K // 2) uint8, weight 2j in the low nibble
    and 2j + 1 in the high one of byte j, each times its row's float32 scale S[row, k // GROUP]. A program reads
    BLOCK_K // 2 bytes of each of its rows a step and the even and odd inputs that go with them."""
    DT: tl.constexpr = OUT.dtype.element_ty
    HALF: tl.constexpr = BLOCK_K // 2
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    rstd = 1.0
    if NORM:  # the input's root mean square, as the lesson's GEMV
        rstd = _rms_rstd(X, K, eps, BLOCK_K)
    acc = tl.zeros([BLOCK_N, HALF], dtype=tl.float32)
    if GATED:
        acc_up = tl.zeros([BLOCK_N, HALF], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        even = k0 + 2 * tl.arange(0, HALF)  # the columns of the low nibbles; +1: the high ones
        col_ok = even < K
        h0 = tl.load(X + even, mask=col_ok, other=0.0).to(tl.float32)
        h1 = tl.load(X + even + 1, mask=col_ok, other=0.0).to(tl.float32)
        if NORM:  # rms_norm: weight * (x * rstd rounded), rounded
            h0 = _round(tl.load(NORM_W + even, mask=col_ok, other=0.0).to(tl.float32) * _round(h0 * rstd, DT), DT)
            h1 = _round(tl.load(NORM_W + even + 1, mask=col_ok, other=0.0).to(tl.float32) * _round(h1 * rstd, DT),
                        DT)
        ok = row_ok[:, None] & col_ok[None, :]
        byte = rows[:, None].to(tl.int64) * stride_p + (even // 2)[None, :]
        scale = rows[:, None].to(tl.int64) * stride_s + (even // GROUP)[None, :]
        b = tl.load(P + byte, mask=ok, other=0).to(tl.int8, bitcast=True).to(tl.int32)
        s = tl.load(S + scale, mask=ok, other=0.0)
        acc += (((b << 28) >> 28).to(tl.float32) * h0[None, :] + (b >> 4).to(tl.float32) * h1[None, :]) * s
        if GATED:
            bu = tl.load(P + byte + N * stride_p, mask=ok, other=0).to(tl.int8, bitcast=True).to(tl.int32)
            su = tl.load(S + scale + N * stride_s, mask=ok, other=0.0)
            acc_up += (((bu << 28) >> 28).to(tl.float32) * h0[None, :] + (bu >> 4).to(tl.float32) * h1[None, :]) * su
    y = tl.sum(acc, axis=1)
    up = y
    if GATED:
        up = tl.sum(acc_up, axis=1)
    _gemv_store(OUT, RES, rows, row_ok, y, up, GATED, RESID)


def int4_gemv(x, w, *, norm=None, eps=1e-5, gated=False, residual=None, config=None):
    """The lesson's ``fused_layer.gemv`` for an int4 weight (``Int4Linear``: ``packed``, ``scales``); a bf16 weight
    goes to the lesson's."""
    if not hasattr(w, "packed"):
        return LESSON_GEMV(x, w, norm=norm, eps=eps, gated=gated, residual=residual, config=config)
    rows, k = w.shape
    n = rows // 2 if gated else rows
    bn, bk, warps = config or CONFIGS.get((n, k, gated)) or fused_layer.gemv_config(n, k, gated)
    out = torch.empty(n, device=x.device, dtype=x.dtype)
    gemv_int4_kernel[(triton.cdiv(n, bn),)](x, w.packed, w.scales, out, residual if residual is not None else out,
                                            norm if norm is not None else x, n, k, w.packed.stride(0),
                                            w.scales.stride(0), eps, NORM=norm is not None, GATED=gated,
                                            RESID=residual is not None, GROUP=w.group_size, BLOCK_N=bn, BLOCK_K=bk,
                                            num_warps=warps)
    return out


CONFIGS = {}  # (N, K, gated) -> the sweep's best (BLOCK_N, BLOCK_K, num_warps)


def sweep(qw, c) -> tuple:
    lw = qw["layers"][0]
    x = torch.randn(c.d_model, device="cuda", dtype=torch.bfloat16)
    xf = torch.randn(c.d_ff, device="cuda", dtype=torch.bfloat16)
    cases = [("qkv + norm", lw["wqkv"], x, dict(norm=qw["norm"])), ("o + residual", lw["wo"], x, dict(residual=x)),
             ("gate_up + norm + swiglu", lw["w_gate_up"], x, dict(norm=qw["norm"], gated=True)),
             ("down + residual", lw["w_down"], xf, dict(residual=x)), ("head + norm", qw["head"], x,
                                                                         dict(norm=qw["norm"]))]
    rows, best_cfg = [], {}
    for name, w, xin, kw in cases:
        nbytes = w.packed.nbytes + w.scales.nbytes
        buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(buf)
        t_copy = triton.testing.do_bench(lambda: dst.copy_(buf), return_mode="median")
        best = None
        for bn in (1, 2, 4, 8):
            for bk in (256, 512, 1024):
                for warps in (4, 8):
                    t = triton.testing.do_bench(lambda: int4_gemv(xin, w, config=(bn, bk, warps), **kw),
                                                return_mode="median")
                    if best is None or t < best[0]:
                        best = (t, bn, bk, warps)
        gated = bool(kw.get("gated"))
        n = w.shape[0] // 2 if gated else w.shape[0]
        best_cfg[(n, w.shape[1], gated)] = best[1:]
        rows.append({"gemv": name, "shape": list(w.shape), "bytes": nbytes, "us_int4": best[0] * 1e3,
                     "config": best[1:], "read_gbps": nbytes / best[0] / 1e6, "copy_gbps": 2 * nbytes / t_copy / 1e6})
        print(json.dumps(rows[-1]), flush=True)
    return rows, best_cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.time()
    c = model.Config.small(max_seq=max(1024, a.context))
    fw = model.fuse_weights(model.make_weights(c, "cuda", torch.bfloat16, seed=0))
    prompt = decode.make_prompt(c, a.context - a.new, device="cuda", seed=1)
    qw = model.quantize_weights(fw, backend="lesson")
    out = {}
    out["gemvs"], best_cfg = sweep(qw, c)
    bw = timing.copy_gbps(1 << 30) * 1e9
    steps = {"triton_layer_bf16": fused_layer.triton_layer(fw, c, prompt, a.new, runs=3, warmup=1)}
    fused_layer.gemv = int4_gemv
    steps["triton_layer_int4_default"] = fused_layer.triton_layer(qw, c, prompt, a.new, runs=3, warmup=1)
    CONFIGS.update(best_cfg)
    steps["triton_layer_int4_swept"] = fused_layer.triton_layer(qw, c, prompt, a.new, runs=3, warmup=1)
    fused_layer.gemv = LESSON_GEMV
    ref4 = decode.eager_dynamic(qw, c, prompt, a.new, margins=True)
    tol = decode.tie_tolerance(decode.path_noise(qw, c, prompt, a.new))
    tg = model.quantize_weights(fw, backend="tinygemm")
    steps["int4_compiled_tinygemm"] = decode.compiled(tg, c, prompt, a.new, runs=3, warmup=1)
    fl = floor.tokens_per_second_floor(c, bw, a.context)
    out["steps"] = {k: {"tokens_per_s": r.tokens_per_s, "fraction_of_bf16_floor": r.tokens_per_s / fl,
                        "agreement_vs_int4_eager": decode.near_tie(ref4, r.tokens, tol) if "int4" in k else None}
                    for k, r in steps.items()}
    out["int4_swept_over_bf16"] = steps["triton_layer_int4_swept"].tokens_per_s / steps["triton_layer_bf16"].tokens_per_s
    out.update(floor_tokens_per_s=fl, copy_bytes_per_s=bw, torch=torch.__version__, triton=triton.__version__,
               device=torch.cuda.get_device_name(), wall_s=time.time() - t0)
    print(json.dumps(out, indent=1, default=str))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
