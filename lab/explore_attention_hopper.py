#!/usr/bin/env python3
"""Lesson 08 (issue #33): how close can a Triton 3.x forward get to cuDNN's fused attention on an H100, and which
change buys what? And does a different tile or pipeline depth close the backward's gap to cuDNN's?

Forward variants of the lesson's kernel, each timed over a few configs per shape (do_bench, best kept), then the
best of each in one interleaved run against the lesson's kernel, SDPA CUDNN_ATTENTION and FLASH_ATTENTION:

* ``fma``: the lesson's kernel with the softmax scale folded into the subtraction of the maximum (one FMA per score
  instead of a multiply and a subtract; the maximum is taken on the raw scores and scaled once per row);
* ``tma``: ``fma`` with every tile moved by the Tensor Memory Accelerator: one device-side tensor descriptor per
  (batch, head) for q, k, v and o, shape (S, D), so rows past S read as zeros and stores past S are dropped;
* ``tma+ws``: ``tma`` with the unmasked key loop marked ``tl.range(..., warp_specialize=True)`` (Triton's automatic
  warp specialization: producer warps issue the copies, consumer warps the matmuls and the softmax);
* ``+rev``: causal only, the query blocks launched heaviest first (the last query block sees every key).

Backward: the lesson's ``kernels.backward`` with each of several (BLOCK_M, BLOCK_N, warps, stages), against
cuDNN's backward, timed the way ``measure.backward_point`` does.

Usage: python lab/explore_attention_hopper.py [--out FILE] [--quick]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch
import triton
import triton.language as tl

from gpucourse.lessons.l08_flash_attention import kernels, measure
from gpucourse.tiles import scratch_allocator
from gpucourse.timing import interleaved

LOG2E = kernels.LOG2E
SHAPES = [(d, c) for d in (64, 128) for c in (False, True)]
POINT = dict(b=4, h=16, s=4096)


@triton.jit
def _blocks(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, sks, svs, offs_m, offs_n, offs_d, lo, hi, S, qk_scale,
            BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr, WS: tl.constexpr):
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        cols = start_n + offs_n
        if TMA:
            k = tl.trans(k_desc.load([start_n, 0]))
        elif MASK:
            k = tl.load(k_base + cols[None, :] * sks + offs_d[:, None], mask=cols[None, :] < S, other=0.0)
        else:
            k = tl.load(k_base + cols[None, :] * sks + offs_d[:, None])
        s = tl.dot(q, k)
        if MASK:
            keep = cols[None, :] < S
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            s = tl.where(keep, s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            s = s - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]  # one FMA per score
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if TMA:
            v = v_desc.load([start_n, 0])
        elif MASK:
            v = tl.load(v_base + cols[:, None] * svs + offs_d[None, :], mask=cols[:, None] < S, other=0.0)
        else:
            v = tl.load(v_base + cols[:, None] * svs + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def fwd_variant(Q, K, V, O, LSE, qk_scale, S, H, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
                D: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                TMA: tl.constexpr, WS: tl.constexpr, REVERSE: tl.constexpr):
    pid_m = tl.program_id(0)
    if REVERSE:
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_base = Q + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
    k_base = K + b.to(tl.int64) * skb + h.to(tl.int64) * skh
    v_base = V + b.to(tl.int64) * svb + h.to(tl.int64) * svh
    o_base = O + b.to(tl.int64) * sob + h.to(tl.int64) * soh
    k_desc = None
    v_desc = None
    o_desc = None
    if TMA:
        q_desc = tl.make_tensor_descriptor(q_base, shape=[S, D], strides=[sqs, 1], block_shape=[BLOCK_M, D])
        k_desc = tl.make_tensor_descriptor(k_base, shape=[S, D], strides=[sks, 1], block_shape=[BLOCK_N, D])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[S, D], strides=[svs, 1], block_shape=[BLOCK_N, D])
        o_desc = tl.make_tensor_descriptor(o_base, shape=[S, D], strides=[sos, 1], block_shape=[BLOCK_M, D])
        q = q_desc.load([pid_m * BLOCK_M, 0])
    else:
        q = tl.load(q_base + offs_m[:, None] * sqs + offs_d[None, :], mask=offs_m[:, None] < S, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    if CAUSAL:
        free_end = pid_m * BLOCK_M
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    else:
        free_end = (S // BLOCK_N) * BLOCK_N
        hi = S
    acc, l_i, m_i = _blocks(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, sks, svs, offs_m, offs_n, offs_d, 0,
                            free_end, S, qk_scale, BLOCK_N, False, CAUSAL, TMA, WS)
    acc, l_i, m_i = _blocks(acc, l_i, m_i, q, k_desc, v_desc, k_base, v_base, sks, svs, offs_m, offs_n, offs_d,
                            free_end, hi, S, qk_scale, BLOCK_N, True, CAUSAL, TMA, False)
    acc = acc / l_i[:, None]
    if TMA:
        o_desc.store([pid_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))
    else:
        tl.store(o_base + offs_m[:, None] * sos + offs_d[None, :], acc.to(O.dtype.element_ty),
                 mask=offs_m[:, None] < S)
    tl.store(LSE + bh.to(tl.int64) * S + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < S)


VARIANTS = {"fma": dict(TMA=False, WS=False), "tma": dict(TMA=True, WS=False), "tma+ws": dict(TMA=True, WS=True)}
CONFIGS = {64: [(128, 64, 4, 3), (128, 64, 4, 4), (128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 4, 3)],
           128: [(128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 3), (128, 128, 4, 2)]}


def variant_call(q, k, v, causal, cfg, TMA, WS, REVERSE=False):
    B, H, S, D = q.shape
    bm, bn, warps, stages = cfg
    o = torch.empty_like(q)
    lse = torch.empty((B * H, S), device=q.device, dtype=torch.float32)

    def call():
        fwd_variant[(triton.cdiv(S, bm), B * H)](q, k, v, o, lse, LOG2E / math.sqrt(D), S, H, *q.stride()[:3],
                                                 *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], D=D,
                                                 CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn, TMA=TMA, WS=WS,
                                                 REVERSE=REVERSE, num_warps=warps, num_stages=stages)
        return o
    return call


def check(doc):
    """Every variant against the float64 reference at ragged S (not a multiple of any block)."""
    errs = {}
    for name, flags in VARIANTS.items():
        for d in (64, 128):
            for s in (77, 1000):
                for causal in (False, True):
                    q, k, v = (torch.randn(2, 3, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
                    r = kernels.reference(q, k, v, causal)
                    try:
                        o = variant_call(q, k, v, causal, CONFIGS[d][0], **flags, REVERSE=causal)()
                        errs[f"{name} D{d} S{s} c{int(causal)}"] = float((o.double() - r).abs().max() / r.abs().max())
                    except Exception as exc:
                        errs[f"{name} D{d} S{s} c{int(causal)}"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    doc["check_rel_err"] = errs


def forward(doc, quick):
    b, h, s = POINT["b"], POINT["h"], POINT["s"]
    out = {}
    for d, causal in SHAPES:
        key = f"D{d}{' causal' if causal else ''}"
        q, k, v = measure.inputs(b, h, s, d)
        nflops = measure.flops(b, h, s, d, causal)
        sweep, best = [], {}
        for name, flags in VARIANTS.items():
            for rev in ((False, True) if causal else (False,)):
                vname = name + ("+rev" if rev else "")
                for cfg in CONFIGS[d]:
                    try:
                        fn = variant_call(q, k, v, causal, cfg, **flags, REVERSE=rev)
                        fn()
                        ms = triton.testing.do_bench(fn, warmup=10, rep=30 if quick else 60)
                    except Exception as exc:
                        sweep.append(dict(variant=vname, cfg=cfg, error=f"{type(exc).__name__}: {str(exc)[:200]}"))
                        continue
                    sweep.append(dict(variant=vname, cfg=cfg, ms=ms, tflops=nflops / ms / 1e9))
                    if vname not in best or ms < best[vname][1]:
                        best[vname] = (cfg, ms)
        impls = {measure.OURS: lambda: kernels.forward(q, k, v, causal)[0],
                 "SDPA CUDNN_ATTENTION": lambda: measure.sdpa("CUDNN_ATTENTION")(q, k, v, causal),
                 "SDPA FLASH_ATTENTION": lambda: measure.sdpa("FLASH_ATTENTION")(q, k, v, causal)}
        for vname, (cfg, _) in best.items():
            base = vname.replace("+rev", "")
            impls[vname] = variant_call(q, k, v, causal, cfg, **VARIANTS[base], REVERSE=vname.endswith("+rev"))
        for fn in impls.values():
            fn()
        torch.cuda.synchronize()
        res = interleaved(impls, rounds=2 if quick else 3, flops=nflops, dtype=q.dtype, rep_ms=60)
        ms = {n: r.median_ms for n, r in res.items()}
        cudnn = ms["SDPA CUDNN_ATTENTION"]
        out[key] = dict(sweep=sweep, best_cfg={n: c for n, (c, _) in best.items()}, ms=ms,
                        tflops={n: nflops / m / 1e9 for n, m in ms.items()},
                        vs_cudnn={n: cudnn / m for n, m in ms.items()},
                        spread={n: measure.spread(r.medians_ms) for n, r in res.items()})
        print(key, json.dumps({n: round(x, 3) for n, x in out[key]["vs_cudnn"].items()}), flush=True)
    doc["forward"] = out


BWD_CONFIGS = {64: [(64, 128, 8, 2), (64, 128, 4, 2), (32, 128, 4, 3), (64, 64, 4, 2), (64, 128, 8, 3),
                    (128, 128, 8, 1)],
               128: [(64, 128, 8, 1), (64, 128, 8, 2), (32, 128, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2),
                     (32, 64, 4, 3)]}


def backward(doc, quick):
    b, h, s = POINT["b"], POINT["h"], POINT["s"]
    out = {}
    for d, causal in SHAPES:
        key = f"D{d}{' causal' if causal else ''}"
        q, k, v = measure.inputs(b, h, s, d)
        do = torch.randn_like(q)
        o, lse = kernels.forward(q, k, v, causal)
        nflops = 2.5 * measure.flops(b, h, s, d, causal)
        sweep = []
        best = None
        for cfg in BWD_CONFIGS[d]:
            blocks = dict(BLOCK_M=cfg[0], BLOCK_N=cfg[1], num_warps=cfg[2], num_stages=cfg[3])
            fn = (lambda blocks=blocks: kernels.backward(q, k, v, o, lse, do, causal, blocks=blocks))
            try:
                fn()
                ms = triton.testing.do_bench(fn, warmup=10, rep=30 if quick else 60)
            except Exception as exc:
                sweep.append(dict(cfg=cfg, error=f"{type(exc).__name__}: {str(exc)[:200]}"))
                continue
            sweep.append(dict(cfg=cfg, ms=ms, tflops=nflops / ms / 1e9))
            if best is None or ms < best[1]:
                best = (cfg, ms)
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        outs = {"ours (default)": kernels.attention(qg, kg, vg, causal),
                "SDPA CUDNN_ATTENTION": measure.sdpa("CUDNN_ATTENTION")(qg, kg, vg, causal),
                "SDPA FLASH_ATTENTION": measure.sdpa("FLASH_ATTENTION")(qg, kg, vg, causal)}
        impls = {n: (lambda out=out: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True))
                 for n, out in outs.items()}
        bc = best[0]
        bblocks = dict(BLOCK_M=bc[0], BLOCK_N=bc[1], num_warps=bc[2], num_stages=bc[3])
        impls["ours (best config)"] = lambda: kernels.backward(q, k, v, o, lse, do, causal, blocks=bblocks)
        for fn in impls.values():
            fn()
        torch.cuda.synchronize()
        res = interleaved(impls, rounds=2 if quick else 3, flops=nflops, dtype=q.dtype, rep_ms=60)
        ms = {n: r.median_ms for n, r in res.items()}
        cudnn = ms["SDPA CUDNN_ATTENTION"]
        out[key] = dict(sweep=sweep, best_cfg=bc, ms=ms, tflops={n: nflops / m / 1e9 for n, m in ms.items()},
                        vs_cudnn={n: cudnn / m for n, m in ms.items()})
        print("bwd", key, json.dumps({n: round(x, 3) for n, x in out[key]["vs_cudnn"].items()}), flush=True)
    doc["backward"] = out


DKDV_CONFIGS = [(64, 64, 4, 2), (64, 128, 8, 2), (32, 128, 4, 2), (64, 128, 4, 3), (128, 64, 8, 2), (64, 64, 4, 3),
                (32, 64, 4, 3)]  # (BLOCK_M queries streamed, BLOCK_N keys kept, warps, stages)
DQ_CONFIGS = [(64, 64, 4, 2), (128, 64, 8, 2), (128, 32, 4, 2), (64, 32, 4, 3), (128, 64, 4, 2), (64, 64, 4, 3),
              (64, 128, 8, 2)]  # (BLOCK_M queries kept, BLOCK_N keys streamed, warps, stages)


def split_backward(doc, quick):
    """The backward's two main kernels tuned apart: each config of each kernel timed alone (do_bench), then the
    best pair (delta kernel included) against the lesson's backward and cuDNN's in one interleaved run."""
    b, h, s = POINT["b"], POINT["h"], POINT["s"]
    out = {}
    for d, causal in SHAPES:
        key = f"D{d}{' causal' if causal else ''}"
        q, k, v = measure.inputs(b, h, s, d)
        do = torch.randn_like(q)
        o, lse = kernels.forward(q, k, v, causal)
        delta = torch.empty_like(lse)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        common = (LOG2E / math.sqrt(d), 1 / math.sqrt(d), s, h, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
                  *do.stride()[:3])

        def dkdv(cfg):
            bm, bn, w, st = cfg
            kernels.attn_bwd_dkdv_kernel[(triton.cdiv(s, bn), b * h)](
                q, k, v, do, lse, delta, dk, dv, *common, D=d, CAUSAL=causal, UPCAST=False, BLOCK_M=bm, BLOCK_N=bn,
                num_warps=w, num_stages=st)

        def dq_(cfg):
            bm, bn, w, st = cfg
            kernels.attn_bwd_dq_kernel[(triton.cdiv(s, bm), b * h)](
                q, k, v, do, lse, delta, dq, *common, D=d, CAUSAL=causal, UPCAST=False, BLOCK_M=bm, BLOCK_N=bn,
                num_warps=w, num_stages=st)

        def fill_delta():
            kernels.attn_bwd_delta_kernel[(triton.cdiv(s, 64), b * h)](o, do, delta, s, h, *o.stride()[:3],
                                                                       *do.stride()[:3], D=d, BLOCK_M=64)

        fill_delta()
        rows = {"dkdv": [], "dq": []}
        for name, fn, cfgs in (("dkdv", dkdv, DKDV_CONFIGS), ("dq", dq_, DQ_CONFIGS)):
            for cfg in cfgs:
                try:
                    fn(cfg)
                    ms = triton.testing.do_bench(lambda: fn(cfg), warmup=10, rep=30 if quick else 50)
                    rows[name].append(dict(cfg=cfg, ms=ms))
                except Exception as exc:
                    rows[name].append(dict(cfg=cfg, error=f"{type(exc).__name__}: {str(exc)[:150]}"))
        best = {n: min((r for r in rows[n] if "ms" in r), key=lambda r: r["ms"])["cfg"] for n in rows}
        want = kernels.backward(q, k, v, o, lse, do, causal)
        dkdv(best["dkdv"])
        dq_(best["dq"])
        err = max(float((x.float() - y.float()).abs().max()) for x, y in zip((dq, dk, dv), want))

        def split_call():
            fill_delta()
            dkdv(best["dkdv"])
            dq_(best["dq"])
        nflops = 2.5 * measure.flops(b, h, s, d, causal)
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        o_c = measure.sdpa("CUDNN_ATTENTION")(qg, kg, vg, causal)
        impls = {"ours (lesson)": lambda: kernels.backward(q, k, v, o, lse, do, causal),
                 "ours (kernels tuned apart)": split_call,
                 "SDPA CUDNN_ATTENTION": lambda: torch.autograd.grad(o_c, (qg, kg, vg), do, retain_graph=True)}
        for fn in impls.values():
            fn()
        torch.cuda.synchronize()
        res = interleaved(impls, rounds=2 if quick else 3, flops=nflops, dtype=q.dtype, rep_ms=60)
        ms = {n: r.median_ms for n, r in res.items()}
        out[key] = dict(rows=rows, best=best, max_abs_diff_vs_lesson=err, ms=ms,
                        vs_cudnn={n: ms["SDPA CUDNN_ATTENTION"] / m for n, m in ms.items()})
        print("split bwd", key, best, json.dumps({n: round(x, 3) for n, x in out[key]["vs_cudnn"].items()}),
              f"diff {err:.2e}", flush=True)
    doc["split_backward"] = out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip", nargs="*", default=[])
    a = ap.parse_args()
    triton.set_allocator(scratch_allocator(torch.device("cuda")))
    doc = {"versions": {"torch": torch.__version__, "triton": triton.__version__,
                        "gpu": torch.cuda.get_device_name()}, "point": POINT}
    for name, fn in (("check", lambda: check(doc)), ("forward", lambda: forward(doc, a.quick)),
                     ("backward", lambda: backward(doc, a.quick)),
                     ("split_backward", lambda: split_backward(doc, a.quick))):
        if name in a.skip:
            continue
        t = time.time()
        try:
            fn()
        except Exception:
            import traceback
            doc[name + "_error"] = traceback.format_exc()[-3000:]
            print(doc[name + "_error"], flush=True)
        doc[name + "_s"] = round(time.time() - t, 1)
        print(name, "done in", doc[name + "_s"], "s", flush=True)
        if name == "check":
            print(json.dumps(doc["check_rel_err"], indent=0), flush=True)
        if a.out:
            json.dump(doc, open(a.out, "w"), indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
