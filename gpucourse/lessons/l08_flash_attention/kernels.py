"""The lesson's FlashAttention in Triton: a forward kernel that never writes the S×S score matrix, and a backward
pass that recomputes it block by block from the log-sum-exp the forward kept.

Shapes: q, k, v and the output are (B, H, S, D), float16 or bfloat16, D in {64, 128}, any S >= 1. Softmax scale
1/sqrt(D). The forward works in base 2: scores are multiplied by ``scale * log2(e)`` once, so each exponential is one
``exp2`` (``exp(x) = exp2(x * log2 e)``), and the saved log-sum-exp is in the same base-2 units.

Forward: one program per (block of BLOCK_M queries, batch·head). It keeps its query block, a running row maximum
``m``, a running sum ``l`` and an fp32 output accumulator on chip, and walks the key/value blocks: scores, new
maximum, rescale of ``l`` and of the accumulator by ``exp2(m_old - m_new)``, ``acc += p @ v``. Blocks that need no
mask (fully below the causal diagonal, fully inside S) run a loop without one; the blocks on the diagonal and the
ragged last block run a second loop with masks. Causal blocks above the diagonal are never visited.

Backward: ``delta = rowsum(dO * O)``; one kernel per key block accumulates dK and dV over the query blocks that see
it, one per query block accumulates dQ over its key blocks; both recompute ``p = exp2(qk * c - lse)``.

:func:`tile_model` is the forward's algorithm in torch on tiles (what the lesson prints; the workbook asks for the
Triton kernel).
"""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
LOG2E = 1.4426950408889634
HEAD_DIMS = (64, 128)
DTYPES = (torch.float16, torch.bfloat16)


# (BLOCK_M, BLOCK_N, num_warps, num_stages) the autotuner tries on a GPU, per head dimension (chosen on an H100:
# D 64 likes 4 warps on 128x64 blocks, D 128 likes 8 warps on 128x128; lab/explore_flash_attention.py).
_TUNED = {64: ((128, 64, 4, 3), (128, 64, 4, 4), (128, 64, 8, 3), (64, 64, 4, 3)),
          128: ((128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3))}
_SHORT = (64, 64, 4, 3)  # S up to 1024: this one config, and no tuning
SHORT_S = 1024


def _config(bm, bn, w, s):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)


def _fwd_configs():
    """On a GPU, every config of :data:`_TUNED` (the pruner keeps those of the call's D and S); in CPU mode one small
    block (the interpreter ignores warps and stages, and small blocks keep it quick)."""
    if INTERPRETED:
        return [_config(16, 16, 4, 1)]
    return [_config(*c) for c in dict.fromkeys((*_TUNED[64], *_TUNED[128], _SHORT))]


def _prune(configs, named_args, **kwargs):
    """Keep the configs tuned for this head dimension, or the one short-sequence config."""
    if INTERPRETED:
        return configs
    d = kwargs.get("D", named_args.get("D"))
    s_key = named_args.get("S_KEY", kwargs.get("S_KEY", SHORT_S + 1))
    wanted = {_SHORT} if s_key <= SHORT_S else set(_TUNED.get(d, _TUNED[64]))
    kept = [c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in wanted]
    return kept or configs[:1]


@triton.jit
def _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n, offs_d, lo, hi, S, qk_scale,
                BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """Key/value blocks [lo, hi) folded into (acc, l, m). MASK: this range has the causal diagonal or the ragged end."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASK:
            k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < S, other=0.0)
        else:
            k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None])
        if UPCAST:  # the interpreter's tl.dot gets bf16 wrong (triton-lang/triton#11584); exact in fp32
            k = k.to(tl.float32)
        s = tl.dot(q, k) * qk_scale  # (BLOCK_M, BLOCK_N) scores, in base-2 units
        if MASK:
            keep = cols[None, :] < S
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)  # how much the old maximum overstated: rescale what was summed with it
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if MASK:
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < S, other=0.0)
        else:
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :])
        if UPCAST:
            acc = tl.dot(p, v.to(tl.float32), acc)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.autotune(configs=_fwd_configs(), key=["S_KEY", "D", "CAUSAL"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def attn_fwd_kernel(Q, K, V, O, LSE, qk_scale, S, H, S_KEY,
                    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
                    D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_base = Q + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
    k_base = K + b.to(tl.int64) * skb + h.to(tl.int64) * skh
    v_base = V + b.to(tl.int64) * svb + h.to(tl.int64) * svh
    row_ok = offs_m[:, None] < S
    q = tl.load(q_base + offs_m[:, None] * sqs + offs_d[None, :], mask=row_ok, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    if CAUSAL:
        free_end = pid_m * BLOCK_M  # keys before the diagonal block: every query of this block sees them all
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    else:
        free_end = (S // BLOCK_N) * BLOCK_N  # whole key blocks; the ragged end (if any) is masked
        hi = S
    acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, sks, svs, offs_m, offs_n, offs_d, 0, free_end, S,
                                qk_scale, BLOCK_N, False, CAUSAL, UPCAST)
    acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, sks, svs, offs_m, offs_n, offs_d, free_end, hi, S,
                                qk_scale, BLOCK_N, True, CAUSAL, UPCAST)
    acc = acc / l_i[:, None]
    o_base = O + b.to(tl.int64) * sob + h.to(tl.int64) * soh
    tl.store(o_base + offs_m[:, None] * sos + offs_d[None, :], acc.to(O.dtype.element_ty), mask=row_ok)
    tl.store(LSE + bh.to(tl.int64) * S + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < S)


def _check(q, k, v):
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"attention: q, k, v must have one shape (B, H, S, D); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"attention takes float16 or bfloat16 q, k, v of one dtype; got {q.dtype}, {k.dtype}, "
                         f"{v.dtype}")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"attention: head dimension D must be one of {HEAD_DIMS}, got {q.shape[-1]}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise ValueError(f"attention: {name}'s last dimension must be contiguous (stride 1)")


def s_key(s: int) -> int:
    """The autotuner's key for a sequence length: the next power of two (capped), so one tuning serves nearby S."""
    return min(triton.next_power_of_2(max(s, 1)), 16384)


def forward(q, k, v, causal: bool = False):
    """(o, lse): the attention output and the base-2 log-sum-exp of each query's scores, (B*H, S) float32."""
    _check(q, k, v)
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B * H, S), device=q.device, dtype=torch.float32)
    qk_scale = LOG2E / math.sqrt(D)
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)  # noqa: E731
    attn_fwd_kernel[grid](q, k, v, o, lse, qk_scale, S, H, s_key(S),
                          q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                          v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                          D=D, CAUSAL=bool(causal), UPCAST=INTERPRETED and q.dtype == torch.bfloat16)
    return o, lse


# ---------------------------------------------------------------------------------------------------------------------
# Backward.


@triton.jit
def attn_bwd_delta_kernel(O, DO, DELTA, S, H, sob, soh, sos, sdb, sdh, sds, D: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta[i] = sum_d dO[i, d] * O[i, d]: the term the softmax's gradient subtracts (= sum_j P_ij dP_ij)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    ok = offs_m[:, None] < S
    o = tl.load(O + b.to(tl.int64) * sob + h.to(tl.int64) * soh + offs_m[:, None] * sos + offs_d[None, :], mask=ok,
                other=0.0).to(tl.float32)
    do = tl.load(DO + b.to(tl.int64) * sdb + h.to(tl.int64) * sdh + offs_m[:, None] * sds + offs_d[None, :], mask=ok,
                 other=0.0).to(tl.float32)
    tl.store(DELTA + bh.to(tl.int64) * S + offs_m, tl.sum(o * do, 1), mask=offs_m < S)


@triton.jit
def _dkdv_blocks(dk, dv, k, v, q_base, do_base, LSE, DELTA, bh, sqs, sds, offs_n, offs_m0, offs_d, lo, hi, S, qk_scale,
                 BLOCK_M: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """Query blocks [lo, hi) folded into this key block's (dk, dv). MASK: the range holds the causal diagonal or the
    ragged end of S; elsewhere every query sees every key of the block and nothing is masked."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        if MASK:
            row_ok = offs_m < S
            q = tl.load(q_base + offs_m[:, None] * sqs + offs_d[None, :], mask=row_ok[:, None], other=0.0)
            do = tl.load(do_base + offs_m[:, None] * sds + offs_d[None, :], mask=row_ok[:, None], other=0.0)
            lse = tl.load(LSE + bh.to(tl.int64) * S + offs_m, mask=row_ok, other=0.0)
            delta = tl.load(DELTA + bh.to(tl.int64) * S + offs_m, mask=row_ok, other=0.0)
        else:
            q = tl.load(q_base + offs_m[:, None] * sqs + offs_d[None, :])
            do = tl.load(do_base + offs_m[:, None] * sds + offs_d[None, :])
            lse = tl.load(LSE + bh.to(tl.int64) * S + offs_m)
            delta = tl.load(DELTA + bh.to(tl.int64) * S + offs_m)
        if UPCAST:
            q, do = q.to(tl.float32), do.to(tl.float32)
        st = tl.dot(k, tl.trans(q)) * qk_scale  # (BLOCK_N, BLOCK_M): scores transposed, base 2
        pt = tl.math.exp2(st - lse[None, :])
        if MASK:
            keep = row_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[:, None] <= offs_m[None, :])
            pt = tl.where(keep, pt, 0.0)
        dv = tl.dot(pt.to(do.dtype), do, dv)
        dpt = tl.dot(v, tl.trans(do))
        dst = pt * (dpt - delta[None, :])
        dk = tl.dot(dst.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, sm_scale, S, H,
                         sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdb, sdh, sds,
                         D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per (key block, batch·head): dV = sum over queries of P^T dO, dK = scale * sum of dS^T Q."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    col_ok = offs_n < S
    k = tl.load(K + b.to(tl.int64) * skb + h.to(tl.int64) * skh + offs_n[:, None] * sks + offs_d[None, :],
                mask=col_ok[:, None], other=0.0)
    v = tl.load(V + b.to(tl.int64) * svb + h.to(tl.int64) * svh + offs_n[:, None] * svs + offs_d[None, :],
                mask=col_ok[:, None], other=0.0)
    if UPCAST:
        k, v = k.to(tl.float32), v.to(tl.float32)
    q_base = Q + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
    do_base = DO + b.to(tl.int64) * sdb + h.to(tl.int64) * sdh
    dk = tl.zeros((BLOCK_N, D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, D), dtype=tl.float32)
    # Keys past S (a ragged last block) are loaded as zeros; their rows of dK and dV are computed and never stored.
    full_end = (S // BLOCK_M) * BLOCK_M  # query blocks wholly inside S
    if CAUSAL:
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M  # queries before this key block never see it
        diag_end = tl.minimum(tl.cdiv((pid_n + 1) * BLOCK_N, BLOCK_M) * BLOCK_M, S)  # past it, they see it all
    else:
        lo = 0
        diag_end = 0
    free_end = tl.maximum(diag_end, full_end)
    dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, LSE, DELTA, bh, sqs, sds, offs_n, offs_m0, offs_d, lo,
                          diag_end, S, qk_scale, BLOCK_M, True, CAUSAL, UPCAST)
    dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, LSE, DELTA, bh, sqs, sds, offs_n, offs_m0, offs_d, diag_end,
                          free_end, S, qk_scale, BLOCK_M, False, CAUSAL, UPCAST)
    dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, LSE, DELTA, bh, sqs, sds, offs_n, offs_m0, offs_d, free_end,
                          S, S, qk_scale, BLOCK_M, True, CAUSAL, UPCAST)
    dk = dk * sm_scale
    tl.store(DK + b.to(tl.int64) * skb + h.to(tl.int64) * skh + offs_n[:, None] * sks + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(DV + b.to(tl.int64) * svb + h.to(tl.int64) * svh + offs_n[:, None] * svs + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=col_ok[:, None])


@triton.jit
def _dq_blocks(dq, q, do, lse, delta, k_base, v_base, sks, svs, offs_m, offs_n0, offs_d, lo, hi, S, qk_scale,
               BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """Key blocks [lo, hi) folded into this query block's dq; MASK as in :func:`_dkdv_blocks`."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        if MASK:
            col_ok = offs_n < S
            k = tl.load(k_base + offs_n[:, None] * sks + offs_d[None, :], mask=col_ok[:, None], other=0.0)
            v = tl.load(v_base + offs_n[:, None] * svs + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        else:
            k = tl.load(k_base + offs_n[:, None] * sks + offs_d[None, :])
            v = tl.load(v_base + offs_n[:, None] * svs + offs_d[None, :])
        if UPCAST:
            k, v = k.to(tl.float32), v.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        p = tl.math.exp2(s - lse[:, None])
        if MASK:
            keep = col_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def attn_bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, qk_scale, sm_scale, S, H,
                       sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdb, sdh, sds,
                       D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per (query block, batch·head): dQ = scale * sum over keys of dS K."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < S
    q = tl.load(Q + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh + offs_m[:, None] * sqs + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    do = tl.load(DO + b.to(tl.int64) * sdb + h.to(tl.int64) * sdh + offs_m[:, None] * sds + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0)
    if UPCAST:
        q, do = q.to(tl.float32), do.to(tl.float32)
    lse = tl.load(LSE + bh.to(tl.int64) * S + offs_m, mask=row_ok, other=0.0)
    delta = tl.load(DELTA + bh.to(tl.int64) * S + offs_m, mask=row_ok, other=0.0)
    k_base = K + b.to(tl.int64) * skb + h.to(tl.int64) * skh
    v_base = V + b.to(tl.int64) * svb + h.to(tl.int64) * svh
    dq = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    # Queries past S (a ragged last block) are zeros with do = 0, so their dS is 0; their rows are never stored.
    if CAUSAL:
        free_end = ((pid_m * BLOCK_M + 1) // BLOCK_N) * BLOCK_N  # key blocks every query of this block sees whole
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    else:
        free_end = (S // BLOCK_N) * BLOCK_N  # whole key blocks; the ragged end is masked
        hi = S
    dq = _dq_blocks(dq, q, do, lse, delta, k_base, v_base, sks, svs, offs_m, offs_n0, offs_d, 0, free_end, S,
                    qk_scale, BLOCK_N, False, CAUSAL, UPCAST)
    dq = _dq_blocks(dq, q, do, lse, delta, k_base, v_base, sks, svs, offs_m, offs_n0, offs_d, free_end, hi, S,
                    qk_scale, BLOCK_N, True, CAUSAL, UPCAST)
    dq = dq * sm_scale
    tl.store(DQ + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh + offs_m[:, None] * sqs + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


# (BLOCK_M, BLOCK_N, warps, stages) of the backward: 64 x 64 blocks with 4 warps and 2 stages ran fastest of six
# configs at both head dimensions on an H100 (lab/explore_attention_hopper.py, results in
# lab/results/h100-explore-attention-hopper.json).
_BWD = (64, 64, 4, 2)


def _bwd_blocks(d: int) -> dict:
    if INTERPRETED:
        return dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
    bm, bn, warps, stages = _BWD
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages)


def backward(q, k, v, o, lse, do, causal: bool = False, blocks: dict | None = None):
    """(dq, dk, dv) from the forward's output and log-sum-exp: P is recomputed block by block, never stored.
    ``blocks`` (BLOCK_M, BLOCK_N, num_warps, num_stages) overrides the tuned tiles; both blocks are powers of two
    of at least 16 (Triton's tiles are powers of two, and tl.dot wants 16 or more), so one divides the other, as
    the causal loops' split at block boundaries needs."""
    B, H, S, D = q.shape
    do = do.contiguous()
    qc, kc, vc, oc = (t.contiguous() for t in (q, k, v, o))
    dq, dk, dv = torch.empty_like(qc), torch.empty_like(kc), torch.empty_like(vc)
    delta = torch.empty_like(lse)
    t = dict(blocks or _bwd_blocks(D))
    bm, bn = t["BLOCK_M"], t["BLOCK_N"]
    if any(x < 16 or x & (x - 1) for x in (bm, bn)):
        raise ValueError(f"backward: BLOCK_M and BLOCK_N must be powers of two of at least 16, got {bm} and {bn}")
    attn_bwd_delta_kernel[(triton.cdiv(S, 64), B * H)](oc, do, delta, S, H, *oc.stride()[:3], *do.stride()[:3], D=D,
                                                      BLOCK_M=64)
    upcast = INTERPRETED and q.dtype == torch.bfloat16
    common = (LOG2E / math.sqrt(D), 1 / math.sqrt(D), S, H, *qc.stride()[:3], *kc.stride()[:3], *vc.stride()[:3],
              *do.stride()[:3])
    meta = dict(D=D, CAUSAL=bool(causal), UPCAST=upcast, num_warps=t["num_warps"], num_stages=t["num_stages"])
    # dK/dV: a key block of BLOCK_N rows stays on chip while query blocks of BLOCK_M stream past; dQ the other way.
    attn_bwd_dkdv_kernel[(triton.cdiv(S, bn), B * H)](qc, kc, vc, do, lse, delta, dk, dv, *common, BLOCK_M=bm,
                                                     BLOCK_N=bn, **meta)
    attn_bwd_dq_kernel[(triton.cdiv(S, bn), B * H)](qc, kc, vc, do, lse, delta, dq, *common, BLOCK_M=bn, BLOCK_N=bm,
                                                   **meta)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Forward by :func:`forward` (saves q, k, v, o and the log-sum-exp, not P), backward by :func:`backward`."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, lse = forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, o, lse, do, ctx.causal)
        return dq, dk, dv, None


def attention(q, k, v, causal: bool = False):
    """softmax(q kᵀ / sqrt(D)) v, causal or not, differentiable: the lesson's FlashAttention."""
    return FlashAttention.apply(q, k, v, causal)


def tile_model(q, k, v, causal: bool = False, block_m: int = 64, block_n: int = 64):
    """(o, lse) as :func:`forward` computes them, written with torch operations on tiles: for each block of queries
    (all batches and heads at once) the loop over key blocks with the online-softmax update, in base 2 as the kernel
    does. For reading and for checking on small inputs, not for speed (a few torch calls per tile).

    What the Triton kernel adds: one program per query block instead of the outer loop; pointers and strides
    instead of slices; and, since a Triton tile has one power-of-two size, masks for the ragged end of S."""
    if block_m < 1 or block_n < 1:
        raise ValueError(f"tile_model: block sizes must be positive, got block_m={block_m}, block_n={block_n}")
    B, H, S, D = q.shape
    qk_scale = LOG2E / math.sqrt(D)  # scores in base 2: exp(x) = exp2(x * log2(e))
    o = torch.empty_like(q)
    lse = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    for start_m in range(0, S, block_m):
        end_m = min(start_m + block_m, S)
        rows = torch.arange(start_m, end_m, device=q.device)
        q_tile = q[:, :, start_m:end_m].float()  # loaded once, kept for the whole loop
        m = torch.full((B, H, end_m - start_m), float("-inf"), device=q.device)  # running maximum per query
        l = torch.zeros((B, H, end_m - start_m), device=q.device)  # running sum, against m
        acc = torch.zeros((B, H, end_m - start_m, D), device=q.device)  # running sum of p @ v, against m
        stop = end_m if causal else S  # causal: no key block beyond this query block's diagonal
        for start_n in range(0, stop, block_n):
            end_n = min(start_n + block_n, stop)
            s = q_tile @ k[:, :, start_n:end_n].float().transpose(-1, -2) * qk_scale
            if causal:
                cols = torch.arange(start_n, end_n, device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp2(s - m_new[..., None])
            alpha = torch.exp2(m - m_new)  # < 1 when the maximum grew: rescale what was summed against the old one
            l = l * alpha + p.sum(dim=-1)
            p = p.to(v.dtype).float()  # the kernel rounds p to fp16/bf16 for the tensor cores' second matmul
            acc = acc * alpha[..., None] + p @ v[:, :, start_n:end_n].float()
            m = m_new
        o[:, :, start_m:end_m] = (acc / l[..., None]).to(q.dtype)
        lse[:, :, start_m:end_m] = m + torch.log2(l)
    return o, lse.reshape(B * H, S)


def reference(q, k, v, causal: bool = False, dtype=torch.float64):
    """Attention written plainly in ``dtype`` (float64 by default): the S×S scores, masked, softmax, times v."""
    qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ vd


def source(kernel) -> str:
    """The Python source of a (possibly autotuned, jitted or interpreted) Triton kernel, decorators included."""
    import inspect

    fn = kernel
    while not inspect.isfunction(fn) and hasattr(fn, "fn"):
        fn = fn.fn
    return inspect.getsource(fn)
