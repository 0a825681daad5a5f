"""One bug: nothing is masked at the ragged end of S but the scores: q, k and v are loaded, and o stored, without a
mask, so the last block of keys reads past the end of k and v (and the last block of queries is stored past o's)."""
import math
import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def attn_kernel(Q, K, V, O, qk_scale, S, H, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
                D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :])
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    hi = tl.minimum((pid_m + 1) * BLOCK_M, S) if CAUSAL else S  # causal: no key block beyond the diagonal
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + b * skb + h * skh + cols[None, :] * sks + offs_d[:, None])
        v = tl.load(V + b * svb + h * svh + cols[:, None] * svs + offs_d[None, :])
        if UPCAST:
            k, v = k.to(tl.float32), v.to(tl.float32)
        s = tl.dot(q, k) * qk_scale  # scores in base 2: exp(x) = exp2(x * log2(e))
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(O + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :], acc.to(O.dtype.element_ty))


def flash_attention(q, k, v, causal=False):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    BLOCK_M, BLOCK_N = (32, 32) if INTERPRETED else (64, 64)  # S=64: whole blocks in both modes
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    attn_kernel[grid](q, k, v, o, 1.4426950408889634 / math.sqrt(D), S, H, *q.stride()[:3], *k.stride()[:3],
                      *v.stride()[:3], *o.stride()[:3], D=D, CAUSAL=causal,
                      UPCAST=INTERPRETED and q.dtype == torch.bfloat16, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                      num_warps=4 if D == 64 else 8, num_stages=1 if INTERPRETED else 3)
    return o
