"""One bug: a Triton kernel writes the whole S×S score matrix to memory (a torch.empty buffer), a second one reads
it back for the softmax and the product with v: no torch op computes anything, but the scores are materialised."""
import math
import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def scores_kernel(Q, K, P, scale, S, H, sqb, sqh, sqs, skb, skh, sks, CAUSAL: tl.constexpr, D: tl.constexpr,
                  UPCAST: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqs + d[None, :], mask=rows[:, None] < S, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    for start in range(0, S, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        k = tl.load(K + b * skb + h * skh + cols[None, :] * sks + d[:, None], mask=cols[None, :] < S, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, k) * scale
        if CAUSAL:
            s = tl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
        tl.store(P + bh * S * S + rows[:, None] * S + cols[None, :], s, mask=(rows[:, None] < S) & (cols[None, :] < S))


@triton.jit
def softmax_pv_kernel(P, V, O, S, H, svb, svh, svs, sob, soh, sos, D: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    d = tl.arange(0, D)
    m = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    for start in range(0, S, BLOCK):  # pass 1 over the stored scores: the row maxima
        cols = start + tl.arange(0, BLOCK)
        s = tl.load(P + bh * S * S + rows[:, None] * S + cols[None, :], mask=(rows[:, None] < S) & (cols[None, :] < S),
                    other=float("-inf"))
        m = tl.maximum(m, tl.max(s, 1))
    l = tl.zeros((BLOCK,), dtype=tl.float32)
    acc = tl.zeros((BLOCK, D), dtype=tl.float32)
    for start in range(0, S, BLOCK):  # pass 2: exponentials, sums and the product with v
        cols = start + tl.arange(0, BLOCK)
        s = tl.load(P + bh * S * S + rows[:, None] * S + cols[None, :], mask=(rows[:, None] < S) & (cols[None, :] < S),
                    other=float("-inf"))
        p = tl.exp(s - m[:, None])
        v = tl.load(V + b * svb + h * svh + cols[:, None] * svs + d[None, :], mask=cols[:, None] < S, other=0.0)
        l += tl.sum(p, 1)
        acc = tl.dot(p, v.to(tl.float32), acc)
    tl.store(O + b * sob + h * soh + rows[:, None] * sos + d[None, :], (acc / l[:, None]).to(O.dtype.element_ty),
             mask=rows[:, None] < S)


def flash_attention(q, k, v, causal=False):
    B, H, S, D = q.shape
    scores = torch.empty((B, H, S, S), dtype=torch.float32, device=q.device)
    o = torch.empty_like(q)
    block = 64
    grid = (triton.cdiv(S, block), B * H)
    scores_kernel[grid](q, k, scores, 1 / math.sqrt(D), S, H, *q.stride()[:3], *k.stride()[:3], CAUSAL=causal, D=D,
                        UPCAST=INTERPRETED and q.dtype == torch.bfloat16, BLOCK=block)
    softmax_pv_kernel[grid](scores, v, o, S, H, *v.stride()[:3], *o.stride()[:3], D=D, BLOCK=block)
    return o
