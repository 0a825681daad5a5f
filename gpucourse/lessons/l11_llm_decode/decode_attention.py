"""Split-KV decode attention (flash-decoding) in Triton: one query token per sequence against a long KV cache.

At decode time each sequence has one query token, so attention is (B x Hq) dot products against the cache, a GEMV's
worth of work per head: the time is reading K and V. One program per (sequence, head) would leave most of a GPU idle
at batch 1 (an H100 has 132 SMs, Llama 3.2 1B has 8 KV heads). Flash-decoding splits the cache's length too:

* pass 1 (:func:`split_kv_kernel`): one program per (sequence b, KV head, split of ``split_size`` positions). It loads
  the ``Hq // Hkv`` query heads that share this KV head (grouped-query attention: K and V are read once for the whole
  group, as a tile of ``BLOCK_H`` >= 16 rows for ``tl.dot``) and runs the online softmax over its chunk, in blocks
  of ``BLOCK_N`` positions. It writes, per query head and split, the running maximum ``m`` (base-2 units), the sum
  ``l`` of ``exp2(s - m)`` and the unnormalized output ``sum exp2(s - m) v``, all float32.
* pass 2 (:func:`reduce_kernel`): one program per (b, query head) combines its splits: with ``M = max m_i``,
  ``out = sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i``.

Shapes: q (B, Hq, D); k_cache, v_cache (B, Hkv, S_max, D); seq_len (B,) integers, each sequence's valid length
(ragged: positions at or past it are never read). The grid depends only on B, Hkv and S_max, never on the lengths'
values, so a CUDA graph can replay the call as the lengths grow; programs whose split starts at or past their
sequence's length do nothing, and pass 2 reads only the splits that hold positions. Lengths above S_max are
clamped to S_max on the GPU (checking them there would cost a synchronization); a length of 0 gives zeros. On CPU
tensors the lengths are checked. Softmax scale 1/sqrt(D); D a power of two from 16 to 256.
"""
from __future__ import annotations

import math
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton (macOS/Windows): the kernel is unavailable, the reference is not
    triton = tl = None

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
LOG2E = 1.4426950408889634
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (16, 32, 64, 128, 256)
MIN_SPLIT = 64  # the default split's smallest size: shorter chunks cost more in pass 2 than they save in pass 1


if triton is not None:
    @triton.jit
    def split_kv_kernel(Q, K, V, SEQ, MID_O, MID_M, MID_L, qk_scale, S_MAX, SPLIT, HKV,
                        sqb, sqh, skb, skh, sks, svb, svh, svs, smb, smh, sms,
                        G: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                        UPCAST: tl.constexpr, IEEE: tl.constexpr):
        bk = tl.program_id(0)
        split = tl.program_id(1)
        b = bk // HKV
        hkv = bk % HKV
        length = tl.minimum(tl.load(SEQ + b).to(tl.int32), S_MAX)
        start = split * SPLIT
        end = tl.minimum(start + SPLIT, length)
        if start < end:
            offs_h = tl.arange(0, BLOCK_H)
            h_ok = offs_h < G
            heads = hkv * G + offs_h  # the query heads this KV head serves
            offs_d = tl.arange(0, D)
            q = tl.load(Q + b.to(tl.int64) * sqb + heads[:, None].to(tl.int64) * sqh + offs_d[None, :],
                        mask=h_ok[:, None], other=0.0)
            if UPCAST:  # the interpreter's tl.dot gets bf16 wrong (triton-lang/triton#11584); exact in fp32
                q = q.to(tl.float32)
            k_base = K + b.to(tl.int64) * skb + hkv.to(tl.int64) * skh
            v_base = V + b.to(tl.int64) * svb + hkv.to(tl.int64) * svh
            m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
            l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
            acc = tl.zeros((BLOCK_H, D), dtype=tl.float32)
            for n0 in range(start, end, BLOCK_N):
                cols = n0 + tl.arange(0, BLOCK_N)
                ok = cols < end
                k = tl.load(k_base + cols[:, None].to(tl.int64) * sks + offs_d[None, :], mask=ok[:, None], other=0.0)
                if UPCAST:
                    k = k.to(tl.float32)
                if IEEE:
                    s = tl.dot(q, tl.trans(k), input_precision="ieee")
                else:
                    s = tl.dot(q, tl.trans(k))
                s = tl.where(ok[None, :], s * qk_scale, float("-inf"))  # (BLOCK_H, BLOCK_N), base-2 units
                m_new = tl.maximum(m_i, tl.max(s, 1))
                p = tl.math.exp2(s - m_new[:, None])
                alpha = tl.math.exp2(m_i - m_new)
                l_i = l_i * alpha + tl.sum(p, 1)
                v = tl.load(v_base + cols[:, None].to(tl.int64) * svs + offs_d[None, :], mask=ok[:, None], other=0.0)
                if UPCAST:
                    v = v.to(tl.float32)
                if IEEE:
                    acc = tl.dot(p, v, acc * alpha[:, None], input_precision="ieee")
                else:
                    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
                m_i = m_new
            row = b.to(tl.int64) * smb + heads.to(tl.int64) * smh + split * sms
            tl.store(MID_O + row[:, None] * D + offs_d[None, :], acc, mask=h_ok[:, None])
            tl.store(MID_M + row, m_i, mask=h_ok)
            tl.store(MID_L + row, l_i, mask=h_ok)

    @triton.jit
    def reduce_kernel(MID_O, MID_M, MID_L, SEQ, O, S_MAX, SPLIT, HQ, smb, smh, sms, sob, soh,
                      NS: tl.constexpr, D: tl.constexpr):
        bh = tl.program_id(0)
        b = bh // HQ
        h = bh % HQ
        length = tl.minimum(tl.load(SEQ + b).to(tl.int32), S_MAX)
        n_valid = (length + SPLIT - 1) // SPLIT  # splits that hold positions (pass 1 wrote only those)
        offs_s = tl.arange(0, NS)
        ok = offs_s < n_valid
        offs_d = tl.arange(0, D)
        row = b.to(tl.int64) * smb + h.to(tl.int64) * smh + offs_s * sms
        m = tl.load(MID_M + row, mask=ok, other=float("-inf"))
        l_s = tl.load(MID_L + row, mask=ok, other=0.0)
        o = tl.load(MID_O + row[:, None] * D + offs_d[None, :], mask=ok[:, None], other=0.0)
        m_max = tl.max(m, 0)
        m_max = tl.where(m_max == float("-inf"), 0.0, m_max)  # no split holds positions (length 0)
        w = tl.where(ok, tl.math.exp2(m - m_max), 0.0)
        num = tl.sum(w[:, None] * o, 0)
        den = tl.sum(w * l_s, 0)
        out = num / tl.where(den > 0, den, 1.0)  # length 0: num is 0, the output zeros
        tl.store(O + b.to(tl.int64) * sob + h.to(tl.int64) * soh + offs_d, out.to(O.dtype.element_ty))
else:
    split_kv_kernel = reduce_kernel = None


def _check(q, k_cache, v_cache, seq_len):
    if not all(isinstance(t, torch.Tensor) for t in (q, k_cache, v_cache, seq_len)):
        raise TypeError("decode_attention takes tensors: q, k_cache, v_cache, seq_len")
    if q.dim() != 3:
        raise ValueError(f"decode_attention: q must be (B, Hq, D), one query token per sequence; got shape "
                         f"{tuple(q.shape)}")
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(f"decode_attention: k_cache and v_cache must both be (B, Hkv, S_max, D); got "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    B, Hq, D = q.shape
    Bk, Hkv, _, Dk = k_cache.shape
    if Bk != B or Dk != D:
        raise ValueError(f"decode_attention: q {tuple(q.shape)} and the caches {tuple(k_cache.shape)} disagree on "
                         f"the batch B or the head dimension D")
    if Hq % Hkv:
        raise ValueError(f"decode_attention: Hq={Hq} query heads must be a multiple of Hkv={Hkv} KV heads "
                         f"(grouped-query attention: each KV head serves Hq // Hkv query heads)")
    if D not in HEAD_DIMS:
        raise ValueError(f"decode_attention: head dimension D must be one of {HEAD_DIMS}, got {D}")
    if q.dtype not in DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"decode_attention takes q, k_cache, v_cache of one dtype among float16, bfloat16, float32; "
                         f"got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    if seq_len.shape != (B,) or seq_len.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"decode_attention: seq_len must be an int32 or int64 tensor of shape ({B},), one length "
                         f"per sequence; got {seq_len.dtype} of shape {tuple(seq_len.shape)}")
    if len({t.device for t in (q, k_cache, v_cache, seq_len)}) != 1:
        raise ValueError("decode_attention: q, k_cache, v_cache and seq_len must be on one device")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"decode_attention: {name}'s last dimension must be contiguous (stride 1)")
    if seq_len.device.type == "cpu":
        lo, hi = int(seq_len.min()), int(seq_len.max())
        if lo < 0 or hi > k_cache.shape[2]:
            raise ValueError(f"decode_attention: seq_len must lie in [0, S_max={k_cache.shape[2]}]; got values from "
                             f"{lo} to {hi}")


def default_split(batch: int, n_kv_heads: int, s_max: int, device=None) -> int:
    """Positions per split: enough splits that pass 1 has about two programs per SM (132 SMs when the device is not
    a GPU), each split a multiple of MIN_SPLIT positions."""
    sms = 132
    if device is not None and torch.device(device).type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    n_splits = max(1, math.ceil(2 * sms / max(1, batch * n_kv_heads)))
    split = math.ceil(s_max / n_splits)
    return max(MIN_SPLIT, math.ceil(split / MIN_SPLIT) * MIN_SPLIT)


def decode_attention(q, k_cache, v_cache, seq_len, split_size: int | None = None):
    """Attention of one query token per sequence over the first ``seq_len[b]`` positions of its cache, split over
    the KV length (flash-decoding). Returns (B, Hq, D) in q's dtype. ``split_size``: positions per split (default
    :func:`default_split`); any size >= 1 works, lengths need not be a multiple of it."""
    if triton is None:
        raise RuntimeError("decode_attention needs Triton, which is not installed here")
    _check(q, k_cache, v_cache, seq_len)
    B, Hq, D = q.shape
    _, Hkv, s_max, _ = k_cache.shape
    split = int(split_size) if split_size is not None else default_split(B, Hkv, s_max, q.device)
    if split < 1:
        raise ValueError(f"decode_attention: split_size must be >= 1, got {split}")
    n_splits = math.ceil(s_max / split)
    G = Hq // Hkv
    mid_o = torch.empty((B, Hq, n_splits, D), device=q.device, dtype=torch.float32)
    mid_m = torch.empty((B, Hq, n_splits), device=q.device, dtype=torch.float32)
    mid_l = torch.empty((B, Hq, n_splits), device=q.device, dtype=torch.float32)
    out = torch.empty((B, Hq, D), device=q.device, dtype=q.dtype)
    block_n = min(64, max(16, triton.next_power_of_2(split)))
    if INTERPRETED:
        block_n = min(block_n, 32)
    split_kv_kernel[(B * Hkv, n_splits)](
        q, k_cache, v_cache, seq_len, mid_o, mid_m, mid_l, LOG2E / math.sqrt(D), s_max, split, Hkv,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), mid_m.stride(0), mid_m.stride(1), mid_m.stride(2),
        G=G, BLOCK_H=max(16, triton.next_power_of_2(G)), BLOCK_N=block_n, D=D,
        UPCAST=INTERPRETED and q.dtype == torch.bfloat16, IEEE=q.dtype == torch.float32, num_warps=4)
    reduce_kernel[(B * Hq,)](mid_o, mid_m, mid_l, seq_len, out, s_max, split, Hq,
                             mid_m.stride(0), mid_m.stride(1), mid_m.stride(2), out.stride(0), out.stride(1),
                             NS=max(2, triton.next_power_of_2(n_splits)), D=D, num_warps=4)
    return out


def reference(q, k_cache, v_cache, seq_len):
    """The same attention in float64 torch, sequence by sequence (for tests): (B, Hq, D) float64."""
    B, Hq, D = q.shape
    G = Hq // k_cache.shape[1]
    out = torch.zeros((B, Hq, D), dtype=torch.float64, device=q.device)
    for b in range(B):
        n = int(seq_len[b])
        if n == 0:
            continue
        k = k_cache[b, :, :n].double().repeat_interleave(G, dim=0)  # (Hq, n, D)
        v = v_cache[b, :, :n].double().repeat_interleave(G, dim=0)
        s = torch.einsum("hd,hnd->hn", q[b].double(), k) / math.sqrt(D)
        out[b] = torch.einsum("hn,hnd->hd", torch.softmax(s, dim=-1), v)
    return out
