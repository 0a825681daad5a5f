#!/usr/bin/env python3
"""Lesson 11 (issue #36): does a decode layer of six Triton kernels reach 70 % of the bandwidth floor where the
compiled step stops at 53 %?

The H100 profile of one token (benchmarks/results/h100-l11-bench-run2.json) spent 1,048 µs in 65 GEMVs (cuBLAS,
about 78 % of the copy rate) and 443 µs in 188 other kernels (attention 72, copies and fills 77, norms/RoPE/SiLU/adds
38); the floor is 828 µs. This script built the layer from six kernels, now the lesson's
``gpucourse/lessons/l11_llm_decode/fused_layer.py`` (its last step, ``triton_layer``), which it imports:

1. ``gemv`` with the RMSNorm in its prologue (each program recomputes the norm of the 2,048-float input, which sits
   in L2): ``qkv = W_qkv @ rmsnorm(x)``;
2. ``rope_cache``: RoPE on q and k, k and v written into the cache at the position (read on the device, so a CUDA
   graph replays it), one program per head;
3. + 4. the lesson's split-KV ``decode_attention`` (two launches);
5. ``gemv`` with the residual in its epilogue: ``x = x + W_o @ o``;
6. ``gemv`` with the norm in its prologue and SwiGLU in its epilogue (two accumulators, the gate's and the up's rows
   of the fused weight): ``a = silu(W_g @ h) * (W_u @ h)``; then ``x = x + W_down @ a`` (the fifth kernel again).

Each kernel rounds where the lesson's torch code rounds (a bf16 output of each matmul, of the norm, of RoPE's two
products), so the tokens can be compared with the eager loop's.

``--check`` (CPU, the Triton interpreter, Config.tiny in float32): every kernel against its torch counterpart and the
fused forward's logits and greedy tokens against ``forward_static``. On a GPU (Config.small, bf16, context 512 by
default): each GEMV against ``F.linear`` and a copy of the same bytes, then tokens/s of the fused step in a CUDA graph
against the lesson's graphs and compiled steps in the same run (compiled also with inductor's
coordinate-descent tuning, as gpt-fast compiles), with the floor. Prints JSON; ``--out FILE`` too.
Usage: python lab/explore_decode_layer.py [--check] [--wide] [--context 512] [--new 128] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--check" in sys.argv:  # CPU mode, whatever the machine: the interpreter, bf16 computed as on a GPU
    os.environ["GPUCOURSE_MODE"] = "cpu"

import gpucourse  # noqa: F401,E402  (selects the mode before triton is imported)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from gpucourse import timing  # noqa: E402
from gpucourse.lessons.l11_llm_decode import decode, floor, fused_layer, model  # noqa: E402
from gpucourse.lessons.l11_llm_decode.fused_layer import FusedStatic, gemv, rope_cache  # noqa: E402

def check(dtype=torch.float32) -> dict:
    """CPU, interpreter: each kernel against torch, then the fused forward against forward_static, in ``dtype``
    (bfloat16: does each kernel round where torch does? ``import gpucourse`` makes the interpreter round bf16 as a GPU
    does; as shipped it truncates casts)."""
    torch.manual_seed(0)
    c = model.Config.tiny()
    w = model.fuse_weights(model.cast_weights(model.make_weights(c), dtype))
    lw = w["layers"][0]
    x = torch.randn(c.d_model, dtype=dtype)
    out = {}
    h = model.rms_norm(x, lw["attn_norm"], c.norm_eps)
    out["gemv_norm"] = float((gemv(x, lw["wqkv"], norm=lw["attn_norm"], eps=c.norm_eps) - lw["wqkv"] @ h).abs().max())
    g, u = (lw["w_gate_up"] @ h).chunk(2)
    out["gemv_gated"] = float((gemv(x, lw["w_gate_up"], norm=lw["attn_norm"], eps=c.norm_eps, gated=True)
                               - F.silu(g) * u).abs().max())
    o = torch.randn(lw["wo"].shape[1], dtype=dtype)
    out["gemv_residual"] = float((gemv(o, lw["wo"], residual=x) - (x + lw["wo"] @ o)).abs().max())
    cache = model.StaticCache.empty(c, dtype=dtype)
    pos = torch.tensor([5])
    qkv = torch.randn(lw["wqkv"].shape[0], dtype=dtype)
    q = rope_cache(qkv, w["rope_cos"], w["rope_sin"], pos, cache.k[0][0], cache.v[0][0], c.n_heads, c.n_kv_heads,
                   c.head_dim)
    qw, kw = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    cos, sin = w["rope_cos"][5], w["rope_sin"][5]
    want_q = model.rope(qkv[:qw].view(1, c.n_heads, 1, c.head_dim), cos, sin).view(c.n_heads, c.head_dim)
    want_k = model.rope(qkv[qw:qw + kw].view(1, c.n_kv_heads, 1, c.head_dim), cos, sin).view(c.n_kv_heads, -1)
    out["rope_q"] = float((q - want_q).abs().max())
    out["rope_k"] = float((cache.k[0][0, :, 5] - want_k).abs().max())
    out["cache_v"] = float((cache.v[0][0, :, 5] - qkv[qw + kw:].view(c.n_kv_heads, -1)).abs().max())
    prompt = decode.make_prompt(c, 4)
    n_new = 6
    ref = decode.eager_dynamic(w, c, prompt, n_new)
    s = FusedStatic(w, c, prompt)
    with torch.inference_mode():
        fused = s.loop("fused", s.step, n_new, 1, 0)
        s2 = decode._Static(w, c, prompt, "sdpa")
        s2.prefill()
        s.prefill()
        out["logits"] = float((s.logits(s.tok, s.pos) - s2.logits(s2.tok, s2.pos)).abs().max())
    out["tokens_equal"] = bool(torch.equal(ref.tokens, fused.tokens))
    tol = 1e-4 if dtype == torch.float32 else 0.0625  # bf16: a couple of bf16 steps at the top logits' size
    out["ok"] = out["tokens_equal"] and all(v < tol for k, v in out.items() if k not in ("tokens_equal",))
    return out


WIDE = False  # --wide: BLOCK_N 1-16, BLOCK_K up to 2048 (one step for K = 2048), 2-8 warps
BEST = {}  # (N, K, gated) -> the sweep's fastest (BLOCK_N, BLOCK_K, num_warps)


def gemv_table(weights, c) -> list:
    """Each GEMV of a layer (and the head) timed with do_bench's medians: ours with its fusions (the best of a small
    sweep; the lesson's ``fused_layer.gemv_config`` holds what it found), ``F.linear`` alone (which does less: no norm, residual or SwiGLU), and a copy of the
    weight's bytes (the ceiling)."""
    lw = weights["layers"][0]
    x = torch.randn(c.d_model, device="cuda", dtype=torch.bfloat16)
    rows = []
    cases = [("qkv + norm", lw["wqkv"], x, dict(norm=lw["attn_norm"])),
             ("o + residual", lw["wo"], x, dict(residual=x)),
             ("gate_up + norm + swiglu", lw["w_gate_up"], x, dict(norm=lw["mlp_norm"], gated=True)),
             ("down + residual", lw["w_down"], torch.randn(c.d_ff, device="cuda", dtype=torch.bfloat16),
              dict(residual=x)),
             ("head + norm", weights["embed"], x, dict(norm=weights["norm"]))]
    for name, w, xin, kw in cases:
        dst = torch.empty_like(w)
        t_copy = triton.testing.do_bench(lambda: dst.copy_(w), return_mode="median")
        t_lin = triton.testing.do_bench(lambda: F.linear(xin, w), return_mode="median")
        best = None
        for bn in (1, 2, 4, 8, 16) if WIDE else (2, 4, 8, 16):
            for bk in (512, 1024, 2048) if WIDE else (512, 1024):
                for warps in (2, 4, 8) if WIDE else (4, 8):
                    t = triton.testing.do_bench(lambda: gemv(xin, w, config=(bn, bk, warps), **kw),
                                                return_mode="median")
                    if best is None or t < best[0]:
                        best = (t, bn, bk, warps)
        gated = bool(kw.get("gated"))
        BEST[(w.shape[0] // 2 if gated else w.shape[0], w.shape[1], gated)] = best[1:]
        # a copy reads and writes the bytes: its rate is 2 x bytes / time
        rows.append({"gemv": name, "shape": list(w.shape), "us_ours_fused": best[0] * 1e3, "config": best[1:],
                     "us_f_linear": t_lin * 1e3, "us_copy": t_copy * 1e3,
                     "ours_vs_f_linear": t_lin / best[0], "read_gbps_ours": w.nbytes / best[0] / 1e6,
                     "copy_gbps": 2 * w.nbytes / t_copy / 1e6})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def bench(context: int, n_new: int) -> dict:
    c = model.Config.small(max_seq=max(1024, context + n_new))
    w = model.fuse_weights(model.cast_weights(model.make_weights(c, device="cuda"), torch.bfloat16))
    prompt = decode.make_prompt(c, context - n_new if context > n_new else 16, device="cuda")
    out = {"gemvs": gemv_table(w, c)}
    bw = timing.copy_gbps(1 << 30) * 1e9  # the lesson's floor: its copy rate over a 1 GiB buffer
    steps = {}
    ref = decode.eager_dynamic(w, c, prompt, n_new, margins=True)
    with torch.inference_mode():
        s = FusedStatic(w, c, prompt)
        s.prefill()
        steps["fused_graphs"] = s.loop("fused_graphs", decode._capture(s.step), n_new, 3, 1)
        if WIDE:  # the same layer with each GEMV at its sweep's best configuration
            default = fused_layer.gemv_config
            fused_layer.gemv_config = lambda n, k, gated: BEST.get((n, k, gated)) or default(n, k, gated)
            s = FusedStatic(w, c, prompt)
            s.prefill()
            steps["fused_graphs_swept"] = s.loop("fused_graphs_swept", decode._capture(s.step), n_new, 3, 1)
            fused_layer.gemv_config = default
    steps["graphs_split_kv"] = decode.graphs(w, c, prompt, n_new, runs=3, warmup=1, attention="split_kv")
    steps["compiled"] = decode.compiled(w, c, prompt, n_new, runs=3, warmup=1)
    # gpt-fast compiles with inductor's coordinate-descent tuning of each generated kernel's launch parameters
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    if not WIDE:
        with inductor_config.patch(coordinate_descent_tuning=True):
            steps["compiled_coordinate_descent"] = decode.compiled(w, c, prompt, n_new, runs=3, warmup=1)
    tol = decode.tie_tolerance(decode.path_noise(w, c, prompt, n_new))
    out["near_tie_tolerance"] = tol
    out["steps"] = {k: {"tokens_per_s": r.tokens_per_s, "agreement": decode.near_tie(ref, r.tokens, tol)}
                    for k, r in steps.items()}
    out["bytes_per_token"] = floor.bytes_per_token(c, context)
    out["copy_bytes_per_s"] = bw
    out["floor_tokens_per_s"] = floor.tokens_per_second_floor(c, bw, context)
    for v in out["steps"].values():
        v["fraction_of_floor"] = v["tokens_per_s"] / out["floor_tokens_per_s"]
    out["fused_vs_compiled"] = steps["fused_graphs"].tokens_per_s / steps["compiled"].tokens_per_s
    out["best_configs"] = {str(k): v for k, v in BEST.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="CPU: the kernels and the fused forward in the interpreter")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--wide", action="store_true", help="a wider GEMV sweep, and the layer with its best configs")
    ap.add_argument("--out")
    a = ap.parse_args()
    global WIDE
    WIDE = a.wide
    t0 = time.time()
    res = {"float32": check(), "bfloat16": check(torch.bfloat16)} if a.check else bench(a.context, a.new)
    if a.check:
        res["ok"] = res["float32"]["ok"] and res["bfloat16"]["ok"]
    res.update(torch=torch.__version__, triton=triton.__version__, wall_s=time.time() - t0,
               device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    print(json.dumps(res, indent=1, default=str))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1, default=str)
    if a.check and not res["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
