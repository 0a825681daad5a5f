#!/usr/bin/env python3
"""Lesson 11 (issue #36): can int4 weights make the Triton layer 1.8x faster at all, at batch 1 on Config.small?

An upper bound, measured: the lesson's bf16 Triton layer (``fused_layer.triton_layer``) with every weight matrix cut
to the bytes lesson 07's int4 format takes (4 bits a weight plus a float32 scale per 128: 17/64 of the bf16 bytes,
so an N x K matrix becomes N x (17 K / 64) in bf16) and each GEMV reading only that many columns of its input. That
is an int4 layer whose unpacking costs nothing: the same launches, the same attention, RoPE and cache writes, the
GEMVs at the speed the lesson's bf16 kernel reaches on that many bytes (block sizes swept per shape, as the lesson's
were). Its tokens mean nothing (the weights are cut); its speed is what no int4 GEMV fused this way can beat. On a
GPU (Config.small, bf16, context 512): per cut GEMV the sweep's best time against a copy of the same bytes; then
tokens/s in CUDA graphs of the bf16 layer and the cut layer in the same run, and their ratio against the 1.8x target.
Prints JSON; ``--out FILE`` too.
``--large``: the same for Llama 3 8B's shape, where each matrix is larger and the launches fewer per byte.
Usage: python lab/explore_int4_ceiling.py [--context 512] [--new 128] [--large] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import time

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch
import triton

from gpucourse import timing
from gpucourse.lessons.l11_llm_decode import decode, floor, fused_layer, model

LESSON_GEMV = fused_layer.gemv
CONFIGS = {}  # (N, K, gated) -> the sweep's best (BLOCK_N, BLOCK_K, num_warps)


def int4_width(k: int) -> int:
    """bf16 columns holding the bytes of K int4 weights and their float32 scales per 128: K/2 + K/32 bytes."""
    return k * 17 // 64


class Cut:
    """A cut matrix: the lesson's torch code (the prompt's prefill) applies it to the first columns of its input."""

    def __init__(self, w: torch.Tensor, k: int):
        self.w = w[:, :k].contiguous()
        self.shape, self.nbytes = self.w.shape, self.w.nbytes

    def __call__(self, x):
        return torch.nn.functional.linear(x[..., :self.shape[1]], self.w)


def cut_gemv(x, w, *, norm=None, eps=1e-5, gated=False, residual=None, config=None):
    """The lesson's GEMV on the first w.shape[1] inputs (the cut matrices are narrower than the activations)."""
    w = w.w if isinstance(w, Cut) else w
    k = w.shape[1]
    n = w.shape[0] // 2 if gated else w.shape[0]
    return LESSON_GEMV(x[:k], w, norm=None if norm is None else norm[:k], eps=eps, gated=gated, residual=residual,
                       config=config or CONFIGS.get((n, k, gated)))


MATRICES = ("wqkv", "wo", "w_gate_up", "w_down")


def cut_weights(fw: dict) -> dict:
    """The fused weights with each layer matrix and the head cut to :func:`int4_width` columns (the embedding lookup
    keeps its full rows: it reads one row a token)."""
    layers = [dict(lw, **{m: Cut(lw[m], int4_width(lw[m].shape[1])) for m in MATRICES}) for lw in fw["layers"]]
    return dict(fw, layers=layers, head=Cut(fw["embed"], int4_width(fw["embed"].shape[1])))


def sweep(cw: dict, c) -> list:
    lw = cw["layers"][0]
    x = torch.randn(c.d_ff, device="cuda", dtype=torch.bfloat16)
    nw = torch.ones(c.d_ff, device="cuda", dtype=torch.bfloat16)
    cases = [("qkv + norm", lw["wqkv"], dict(norm=nw)), ("o + residual", lw["wo"], "residual"),
             ("gate_up + norm + swiglu", lw["w_gate_up"], dict(norm=nw, gated=True)),
             ("down + residual", lw["w_down"], "residual"), ("head + norm", cw["head"], dict(norm=nw))]
    rows = []
    for name, w, kw in cases:
        gated = isinstance(kw, dict) and kw.get("gated", False)
        n = w.shape[0] // 2 if gated else w.shape[0]
        if kw == "residual":
            kw = dict(residual=torch.randn(n, device="cuda", dtype=torch.bfloat16))
        nbytes = w.nbytes
        buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(buf)
        t_copy = triton.testing.do_bench(lambda: dst.copy_(buf), return_mode="median")
        best = None
        for bn in (1, 2, 4, 8):
            for bk in (256, 512, 1024):
                for warps in (2, 4, 8):
                    t = triton.testing.do_bench(lambda: cut_gemv(x, w, config=(bn, bk, warps), **kw),
                                                return_mode="median")
                    if best is None or t < best[0]:
                        best = (t, bn, bk, warps)
        CONFIGS[(n, w.shape[1], gated)] = best[1:]
        rows.append({"gemv": name, "shape": list(w.shape), "bytes": nbytes, "us": best[0] * 1e3, "config": best[1:],
                     "read_gbps": nbytes / best[0] / 1e6, "us_copy_same_bytes": t_copy * 1e3,
                     "copy_gbps": 2 * nbytes / t_copy / 1e6})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--large", action="store_true", help="Config.large (Llama 3 8B's shape) instead of Config.small")
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.time()
    c = (model.Config.large if a.large else model.Config.small)(max_seq=a.context)
    fw = model.fuse_weights(model.make_weights(c, "cuda", torch.bfloat16, seed=0))
    prompt = decode.make_prompt(c, a.context - a.new, device="cuda", seed=1)
    cw = cut_weights(fw)
    out = {"config": "large" if a.large else "small", "gemvs": sweep(cw, c)}
    bw = timing.copy_gbps(1 << 30) * 1e9
    steps = {"triton_layer_bf16": fused_layer.triton_layer(fw, c, prompt, a.new, runs=3, warmup=1)}
    fused_layer.gemv = cut_gemv
    try:
        steps["triton_layer_int4_bytes_free_unpacking"] = fused_layer.triton_layer(cw, c, prompt, a.new, runs=3,
                                                                                    warmup=1)
    finally:
        fused_layer.gemv = LESSON_GEMV
    steps["triton_layer_bf16_again"] = fused_layer.triton_layer(fw, c, prompt, a.new, runs=3, warmup=1)
    fl = floor.tokens_per_second_floor(c, bw, a.context)
    out["steps"] = {k: {"tokens_per_s": r.tokens_per_s, "us_per_token": 1e6 / r.tokens_per_s,
                        "fraction_of_bf16_floor": r.tokens_per_s / fl} for k, r in steps.items()}
    bf16 = (steps["triton_layer_bf16"].tokens_per_s + steps["triton_layer_bf16_again"].tokens_per_s) / 2
    out["ceiling_over_bf16"] = steps["triton_layer_int4_bytes_free_unpacking"].tokens_per_s / bf16
    out["target"] = 1.8
    weights_bf16 = model.weight_bytes_read(fw)
    weights_cut = sum(cw["layers"][0][m].nbytes for m in MATRICES) * c.n_layers \
        + cw["head"].nbytes
    out["weight_bytes"] = {"bf16": weights_bf16, "cut (int4 with scales)": weights_cut}
    out["copy_bytes_per_s"] = bw
    out["torch"], out["triton"] = torch.__version__, triton.__version__
    out["device"] = torch.cuda.get_device_name()
    out["wall_s"] = time.time() - t0
    print(json.dumps(out, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
