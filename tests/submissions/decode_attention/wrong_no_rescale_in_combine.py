"""Wrong: the splits are combined as sum(o_i) / sum(l_i), without rescaling each to the common maximum
(exp2(m_i - M)): right when one split holds every position, off wherever a sequence spans several."""
import math
import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def split_kernel(Q, K, V, SEQ, MO, MM, ML, qk_scale, SPLIT, HKV, NS, sqb, sqh, skb, skh, sks, svb, svh, svs,
                 G: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                 UPCAST: tl.constexpr):
    b = tl.program_id(0) // HKV
    hkv = tl.program_id(0) % HKV
    split = tl.program_id(1)
    length = tl.load(SEQ + b)
    start = split * SPLIT
    end = tl.minimum(start + SPLIT, length)
    if start < end:  # a split past this sequence's length has nothing to do
        offs_h = tl.arange(0, BLOCK_H)
        offs_d = tl.arange(0, D)
        heads = hkv * G + offs_h  # the query heads that read this KV head
        q = tl.load(Q + b * sqb + heads[:, None] * sqh + offs_d[None, :], mask=offs_h[:, None] < G, other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_H, D), dtype=tl.float32)
        for n0 in range(start, end, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            ok = cols < end
            k = tl.load(K + b * skb + hkv * skh + cols[:, None] * sks + offs_d[None, :], mask=ok[:, None], other=0.0)
            v = tl.load(V + b * svb + hkv * svh + cols[:, None] * svs + offs_d[None, :], mask=ok[:, None], other=0.0)
            if UPCAST:
                k, v = k.to(tl.float32), v.to(tl.float32)
            s = tl.dot(q, tl.trans(k)) * qk_scale  # base-2 scores: exp(x) = exp2(x * log2(e))
            s = tl.where(ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new
        row = (b * HKV * G + heads) * NS + split  # (b, query head, split) in the partials
        tl.store(MO + row[:, None] * D + offs_d[None, :], acc, mask=offs_h[:, None] < G)
        tl.store(MM + row, m_i, mask=offs_h < G)
        tl.store(ML + row, l_i, mask=offs_h < G)


@triton.jit
def combine_kernel(MO, MM, ML, SEQ, O, SPLIT, HQ, NS, sob, soh, BLOCK_S: tl.constexpr, D: tl.constexpr):
    b = tl.program_id(0) // HQ
    h = tl.program_id(0) % HQ
    n_used = (tl.load(SEQ + b) + SPLIT - 1) // SPLIT  # the splits pass 1 wrote for this sequence
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, D)
    ok = offs_s < n_used
    row = (b * HQ + h) * NS + offs_s
    l_s = tl.load(ML + row, mask=ok, other=0.0)
    o = tl.load(MO + row[:, None] * D + offs_d[None, :], mask=ok[:, None], other=0.0)
    w = tl.where(ok, 1.0, 0.0)  # BUG: each split kept against its own maximum
    out = tl.sum(w[:, None] * o, 0) / tl.sum(w * l_s, 0)
    tl.store(O + b * sob + h * soh + offs_d, out.to(O.dtype.element_ty))


def decode_attention(q, k_cache, v_cache, seq_len):
    B, Hq, D = q.shape
    _, Hkv, S, _ = k_cache.shape
    G = Hq // Hkv
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 132
    n_splits = triton.cdiv(2 * sms, B * Hkv)  # about two programs per SM in pass 1
    split = max(64, triton.cdiv(triton.cdiv(S, n_splits), 64) * 64)
    ns = triton.cdiv(S, split)
    mo = torch.empty((B, Hq, ns, D), device=q.device, dtype=torch.float32)
    mm = torch.empty((B, Hq, ns), device=q.device, dtype=torch.float32)
    ml = torch.empty((B, Hq, ns), device=q.device, dtype=torch.float32)
    out = torch.empty((B, Hq, D), device=q.device, dtype=q.dtype)
    split_kernel[(B * Hkv, ns)](q, k_cache, v_cache, seq_len, mo, mm, ml, 1.4426950408889634 / math.sqrt(D), split,
                                Hkv, ns, q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3],
                                G=G, BLOCK_H=max(16, triton.next_power_of_2(G)), BLOCK_N=32 if INTERPRETED else 64,
                                D=D, UPCAST=INTERPRETED and q.dtype == torch.bfloat16, num_warps=4)
    combine_kernel[(B * Hq,)](mo, mm, ml, seq_len, out, split, Hq, ns, out.stride(0), out.stride(1),
                              BLOCK_S=max(2, triton.next_power_of_2(ns)), D=D, num_warps=4)
    return out
