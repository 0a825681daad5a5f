"""The last step of the ladder: each decoder layer in six Triton launches instead of the ~15 kernels that
``torch.compile`` generates for it, replayed from a CUDA graph.

At batch 1 every matrix product is a GEMV (one vector against a weight matrix): it reads each weight once and does
two flops per weight, so its time is the weight's bytes over the memory bandwidth, and so is the token's. What the
compiled step adds to that floor is everything that is *not* reading weights: the ~190 small kernels a token (norms,
RoPE, SiLU, adds, cache writes, copies) and the gaps between them. This step folds that work into the GEMVs that
need it, where it costs no extra pass over memory:

1. :func:`gemv` with the RMSNorm in its prologue (each program recomputes the norm of the ``d_model`` input, which
   sits in L2): ``qkv = W_qkv @ rmsnorm(x)``;
2. :func:`rope_cache`: RoPE on q and k, and k and v written into the cache at the position (read on the device, so
   the graph replays it), one program per head;
3. and 4. the lesson's split-KV :func:`~.decode_attention.decode_attention` (two launches);
5. :func:`gemv` with the residual in its epilogue: ``x = x + W_o @ o``;
6. :func:`gemv` with the norm in its prologue and SwiGLU in its epilogue (two accumulators, the gate's and the up's
   rows of the fused weight): ``a = silu(W_g @ h) * (W_u @ h)``; then ``x = x + W_down @ a`` (step 5's kernel
   again).

Each kernel rounds where the lesson's torch code rounds (a bf16 output of every matmul, of the norm, of RoPE's two
products), so its tokens can be compared with the eager loop's. Batch 1 only (the capstone's setting).
The exploration that found the block sizes is ``lab/explore_decode_layer.py``.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import decode
from .decode_attention import decode_attention
from .model import Config

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _round(v, DT: tl.constexpr):
    """v rounded to the activations' type and back to float32 (where torch would store a tensor)."""
    return v.to(DT).to(tl.float32)


@triton.jit
def _rms_rstd(X, K, eps, BLOCK_K: tl.constexpr):
    """1 / sqrt(mean(X[:K]^2) + eps) in float32: the RMSNorm's scale of the (K,) input, BLOCK_K elements a step."""
    ss = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        xk = tl.load(X + cols, mask=cols < K, other=0.0).to(tl.float32)
        ss += xk * xk
    return 1.0 / tl.sqrt(tl.sum(ss, axis=0) / K + eps)


@triton.jit
def _gemv_store(OUT, RES, rows, row_ok, y, up, GATED: tl.constexpr, RESID: tl.constexpr):
    """The GEMV's epilogue: y (the rows' float32 sums) rounded as torch's bf16 output; GATED: silu(y) * up (up: the
    up projection's sums); RESID: plus RES[rows]; stored to OUT[rows]."""
    DT: tl.constexpr = OUT.dtype.element_ty
    y = _round(y, DT)
    if GATED:  # F.silu(gate) * up on bf16 tensors
        y = _round(y / (1.0 + tl.exp(-y)), DT) * _round(up, DT)
    if RESID:  # x + linear(...) on bf16 tensors
        y = tl.load(RES + rows, mask=row_ok, other=0.0).to(tl.float32) + y
    tl.store(OUT + rows, y.to(DT), mask=row_ok)


@triton.jit
def gemv_kernel(X, W, OUT, RES, NORM_W, N, K, stride_w, eps,
                NORM: tl.constexpr, GATED: tl.constexpr, RESID: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """OUT[rows] = W[rows] @ h, h = X or rmsnorm(X) * NORM_W; GATED: silu(W[rows] @ h) * (W[N + rows] @ h); RESID:
    plus RES[rows]. One program per BLOCK_N rows, the whole of K."""
    DT: tl.constexpr = OUT.dtype.element_ty
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    rstd = 1.0
    if NORM:  # the input's root mean square: K floats, from L2 after the first program
        rstd = _rms_rstd(X, K, eps, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    if GATED:  # the up projection's rows, N further down the stacked weight
        acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        col_ok = cols < K
        h = tl.load(X + cols, mask=col_ok, other=0.0).to(tl.float32)
        if NORM:  # rms_norm: weight * (x * rstd rounded), rounded
            h = _round(tl.load(NORM_W + cols, mask=col_ok, other=0.0).to(tl.float32) * _round(h * rstd, DT), DT)
        ok = row_ok[:, None] & col_ok[None, :]
        w = tl.load(W + rows[:, None].to(tl.int64) * stride_w + cols[None, :], mask=ok, other=0.0)
        acc += w.to(tl.float32) * h[None, :]
        if GATED:
            wu = tl.load(W + (rows + N)[:, None].to(tl.int64) * stride_w + cols[None, :], mask=ok, other=0.0)
            acc_up += wu.to(tl.float32) * h[None, :]
    y = tl.sum(acc, axis=1)
    up = y
    if GATED:
        up = tl.sum(acc_up, axis=1)
    _gemv_store(OUT, RES, rows, row_ok, y, up, GATED, RESID)


@triton.jit
def rope_cache_kernel(QKV, COS, SIN, POS, Q_OUT, K_CACHE, V_CACHE, HQ, HKV, stride_kh, stride_ks, D: tl.constexpr):
    """One program per head of the fused q|k|v output (Hq + 2 Hkv heads): q heads rotated into Q_OUT, k heads
    rotated and v heads copied into the caches at position POS[0]."""
    DT: tl.constexpr = Q_OUT.dtype.element_ty
    head = tl.program_id(0)
    d = tl.arange(0, D)
    half: tl.constexpr = D // 2
    pos = tl.load(POS).to(tl.int64)
    x = tl.load(QKV + head * D + d).to(tl.float32)
    if head < HQ + HKV:  # rope: x * cos + cat(-x2, x1) * sin, each product rounded as torch's are
        partner = tl.load(QKV + head * D + (d + half) % D).to(tl.float32)
        rotated = tl.where(d < half, -partner, partner)
        c = tl.load(COS + pos * D + d).to(tl.float32)
        s = tl.load(SIN + pos * D + d).to(tl.float32)
        x = _round(x * c, DT) + _round(rotated * s, DT)
        if head < HQ:
            tl.store(Q_OUT + head * D + d, x.to(DT))
        else:
            tl.store(K_CACHE + (head - HQ) * stride_kh + pos * stride_ks + d, x.to(DT))
    else:
        tl.store(V_CACHE + (head - HQ - HKV) * stride_kh + pos * stride_ks + d, x.to(DT))


# (N, K, gated) -> (BLOCK_N, BLOCK_K, num_warps): the fastest of a sweep over BLOCK_N 1-16, BLOCK_K 256-2,048 and
# 2-8 warps on an H100, for Config.small's five GEMVs (lab/results/h100-explore-decode-layer-wide.json).
SWEPT = {(3072, 2048, False): (4, 2048, 4),    # q|k|v, norm in the prologue
         (2048, 2048, False): (2, 2048, 8),    # o, residual in the epilogue
         (8192, 2048, True): (1, 512, 4),      # gate|up, norm and SwiGLU: two accumulators
         (2048, 8192, False): (1, 1024, 4),    # down, residual
         (128256, 2048, False): (4, 2048, 4)}  # the output head, norm


def gemv_config(n: int, k: int, gated: bool) -> tuple:
    """(BLOCK_N, BLOCK_K, num_warps) for an N x K GEMV: the sweep's best (:data:`SWEPT`) at Config.small's shapes;
    for other shapes the rule they follow: few rows a program, so that even a 2,048-row matrix spreads over every SM
    (lesson 06's waves), and a shorter K block for the gated GEMV (two accumulators). Small blocks in the
    interpreter."""
    if INTERPRETED:
        return 32, min(128, triton.next_power_of_2(k)), 4
    if (n, k, gated) in SWEPT:
        return SWEPT[(n, k, gated)]
    if gated:
        return 1, min(512, triton.next_power_of_2(k)), 4
    return 2, min(1024, triton.next_power_of_2(k)), 4


def gemv(x, w, *, norm=None, eps=1e-5, gated=False, residual=None, config=None):
    """``x`` (K,) against ``w`` (N, K) or, gated, (2N, K): see :func:`gemv_kernel`. Returns (N,) in x's dtype.
    ``config``: (BLOCK_N, BLOCK_K, num_warps), default :func:`gemv_config`."""
    n = w.shape[0] // 2 if gated else w.shape[0]
    k = w.shape[1]
    if x.shape != (k,) or w.stride(1) != 1:
        raise ValueError(f"gemv: x must be ({k},) and w row-major; got x {tuple(x.shape)}, w strides {w.stride()}")
    bn, bk, warps = config or gemv_config(n, k, gated)
    out = torch.empty(n, device=x.device, dtype=x.dtype)
    gemv_kernel[(triton.cdiv(n, bn),)](x, w, out, residual if residual is not None else out,
                                       norm if norm is not None else x, n, k, w.stride(0), eps,
                                       NORM=norm is not None, GATED=gated, RESID=residual is not None,
                                       BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
    return out


def rope_cache(qkv, cos, sin, pos, k_cache, v_cache, hq, hkv, d):
    """q rotated, (Hq, D); k rotated and v written into ``k_cache``/``v_cache`` (Hkv, S, D) at ``pos`` (a (1,)
    tensor)."""
    q = torch.empty(hq, d, device=qkv.device, dtype=qkv.dtype)
    rope_cache_kernel[(hq + 2 * hkv,)](qkv, cos, sin, pos, q, k_cache, v_cache, hq, hkv,
                                       k_cache.stride(0), k_cache.stride(1), D=d, num_warps=1)
    return q


def forward_fused(weights: dict, c: Config, token, pos, cache, seq_len):
    """Logits (1, vocab) of one token (a (1, 1) tensor) at ``pos`` (a (1,) tensor), batch 1, fused weights
    (:func:`~.model.fuse_weights`); ``seq_len`` a (1,) tensor equal to pos + 1 (kept beside it for the graph)."""
    x = weights["embed"].index_select(0, token.view(1)).view(-1)
    for i, lw in enumerate(weights["layers"]):
        qkv = gemv(x, lw["wqkv"], norm=lw["attn_norm"], eps=c.norm_eps)
        q = rope_cache(qkv, weights["rope_cos"], weights["rope_sin"], pos, cache.k[i][0], cache.v[i][0],
                       c.n_heads, c.n_kv_heads, c.head_dim)
        o = decode_attention(q[None], cache.k[i], cache.v[i], seq_len)
        x = gemv(o.view(-1), lw["wo"], residual=x)
        a = gemv(x, lw["w_gate_up"], norm=lw["mlp_norm"], eps=c.norm_eps, gated=True)
        x = gemv(a, lw["w_down"], residual=x)
    return gemv(x, weights.get("head", weights["embed"]), norm=weights["norm"], eps=c.norm_eps)[None]


class FusedStatic(decode._Static):
    """The lesson's static-cache decoding (prefill with SDPA, then one token a step) with :func:`forward_fused`."""

    def __init__(self, weights, config, prompt):
        if prompt.shape[0] != 1 or "wqkv" not in weights["layers"][0]:
            raise ValueError("the fused layer decodes batch 1 with fused weights (model.fuse_weights)")
        super().__init__(weights, config, prompt, "sdpa")
        self.seq_len = torch.zeros((1,), dtype=torch.int64, device=prompt.device)

    def logits(self, tok, pos):
        if tok.shape[1] > 1:
            return super().logits(tok, pos)
        self.seq_len.copy_(pos + 1)
        return forward_fused(self.weights, self.config, tok, pos, self.cache, self.seq_len)


@torch.inference_mode()
def triton_layer(weights: dict, config: Config, prompt, n_new: int, runs: int = 1, warmup: int = 0) -> decode.Run:
    """Greedy decoding with :func:`forward_fused`, each step replayed from a CUDA graph on a GPU; in CPU mode the
    kernels run in Triton's interpreter, launched one by one (tokens only: its time says nothing)."""
    decode._check(config, prompt, n_new, static=True)
    s = FusedStatic(weights, config, prompt)
    if prompt.device.type != "cuda":
        return s.loop("triton_layer", s.step, n_new, runs, warmup)
    s.prefill()  # a valid position for the warm-up steps
    return s.loop("triton_layer", decode._capture(s.step), n_new, runs, warmup)
