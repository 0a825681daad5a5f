"""Right, another way: one program per (sequence, query head, split of 100 positions, not a power of two), the dot
products as element-wise products summed over D (no tl.dot), the partials combined by a second kernel. Each query
head of a group reads its K and V again (a GPU's L2 serves the repeats)."""
import math

import torch
import triton
import triton.language as tl

SPLIT = 100
BLOCK_N = 32


@triton.jit
def partial_kernel(Q, K, V, SEQ, PO, PM, PL, scale, HQ, G, NS, sqb, sqh, skb, skh, sks, svb, svh, svs,
                   SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    b = tl.program_id(0) // HQ
    h = tl.program_id(0) % HQ
    j = tl.program_id(1)
    kv = h // G
    n = tl.load(SEQ + b)
    lo = j * SPLIT
    hi = tl.minimum(lo + SPLIT, n)
    if lo < hi:
        d = tl.arange(0, D)
        q = tl.load(Q + b * sqb + h * sqh + d).to(tl.float32)
        m = -float("inf")
        l = 0.0
        acc = tl.zeros((D,), dtype=tl.float32)
        for n0 in range(lo, hi, BLOCK_N):
            pos = n0 + tl.arange(0, BLOCK_N)
            ok = pos < hi
            k = tl.load(K + b * skb + kv * skh + pos[:, None] * sks + d[None, :], mask=ok[:, None], other=0.0)
            s = tl.sum(k.to(tl.float32) * q[None, :], 1) * scale
            s = tl.where(ok, s, -float("inf"))
            m_new = tl.maximum(m, tl.max(s, 0))
            p = tl.exp(s - m_new)
            c = tl.exp(m - m_new)
            v = tl.load(V + b * svb + kv * svh + pos[:, None] * svs + d[None, :], mask=ok[:, None], other=0.0)
            acc = acc * c + tl.sum(p[:, None] * v.to(tl.float32), 0)
            l = l * c + tl.sum(p, 0)
            m = m_new
        base = (b * HQ + h) * NS + j
        tl.store(PO + base * D + d, acc)
        tl.store(PM + base, m)
        tl.store(PL + base, l)


@triton.jit
def final_kernel(PO, PM, PL, SEQ, O, HQ, NS, sob, soh, SPLIT: tl.constexpr, BLOCK_S: tl.constexpr,
                 D: tl.constexpr):
    b = tl.program_id(0) // HQ
    h = tl.program_id(0) % HQ
    used = tl.cdiv(tl.load(SEQ + b), SPLIT)
    j = tl.arange(0, BLOCK_S)
    d = tl.arange(0, D)
    ok = j < used
    base = (b * HQ + h) * NS + j
    m = tl.load(PM + base, mask=ok, other=-float("inf"))
    l = tl.load(PL + base, mask=ok, other=0.0)
    o = tl.load(PO + base[:, None] * D + d[None, :], mask=ok[:, None], other=0.0)
    w = tl.where(ok, tl.exp(m - tl.max(m, 0)), 0.0)
    tl.store(O + b * sob + h * soh + d, (tl.sum(w[:, None] * o, 0) / tl.sum(w * l, 0)).to(O.dtype.element_ty))


def decode_attention(q, k_cache, v_cache, seq_len):
    B, Hq, D = q.shape
    Hkv, S = k_cache.shape[1], k_cache.shape[2]
    ns = triton.cdiv(S, SPLIT)
    po = torch.empty((B, Hq, ns, D), device=q.device, dtype=torch.float32)
    pm = torch.empty((B, Hq, ns), device=q.device, dtype=torch.float32)
    pl = torch.empty((B, Hq, ns), device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    partial_kernel[(B * Hq, ns)](q, k_cache, v_cache, seq_len, po, pm, pl, 1 / math.sqrt(D), Hq, Hq // Hkv, ns,
                                 q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3],
                                 SPLIT=SPLIT, BLOCK_N=BLOCK_N, D=D)
    final_kernel[(B * Hq,)](po, pm, pl, seq_len, out, Hq, ns, out.stride(0), out.stride(1), SPLIT=SPLIT,
                            BLOCK_S=max(2, triton.next_power_of_2(ns)), D=D)
    return out
