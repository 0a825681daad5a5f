#!/usr/bin/env python3
"""Exploration behind issue #15, twelfth round: the int4 GEMV at M = 1 on tensor cores, weights as the A operand.

The rows kernel (kernels.w4a16_rows_kernel) is issue-bound on the H100: ~5 SASS instructions per weight, of which
the multiply-adds on the CUDA cores are the bulk. Round four (explore_quant_dot.py) moved them to tensor cores with
x padded to 16 rows as A and the dequantized weights as B: B must sit in shared memory for wgmma, so every weight
went registers -> shared -> tensor core, 0.4-0.77x bf16. Here the orientation is turned around:

    out^T[BLOCK_N, 16] = W[BLOCK_N, 128] @ x^T[128, 16]      (x^T: x's M <= 16 rows as columns, zero-padded)

so the weights are A, which a tensor-core MMA takes from registers, and x^T is the small B operand. The weights are
never rewritten, nor shared-memory staged:

* a group (128 columns = 16 int32 words of 8 nibbles, ``pack_int4``'s layout) is one step; nibble j of the 16 words
  of a row is a (BLOCK_N, 16) A tile on its own, so a group is 8 dots of K = 16, A_j against the x "plane" j
  (B_j[w, m] = x[m, 8w + j]); no reshape of the words, any order of the dequantized values is x's order;
* dequantizing is Marlin's bf16 trick: a nibble ORed into the mantissa of the bf16 128 (0x4300) is 128 + u; with
  the sign bit flipped in the same logic op (u ^ 8 = q + 8) a weight is q + 136 in bf16, exact. One PTX block
  (``tl.inline_asm_elementwise``, two words at a time: pack=2) makes the 8 bf16 pairs of two words with 2 shifts,
  8 byte-permutes (PRMT) and 8 LOP3: ~1.1 instructions a weight. The +136 comes back out per group:
  sum_k (q + 136) x = sum_k q x + 136 * sum_k x, so a group's partial is corrected with 136 * (sum of x over the
  group), computed once with x^T;
* the group scale multiplies the group's float32 partial (BLOCK_N x 16) before it joins the accumulator;
* split-K: N / BLOCK_N tiles are too few programs for 132 SMs (8192 / 64 = 128), so SPLIT programs share a tile,
  each over K / SPLIT; each writes its float32 partial and the last one to finish (a counter per tile) sums the
  SPLIT partials in order (deterministic) and writes bf16.

A small kernel first writes x^T in planes (bf16, (8, K/8, 16)), the per-group sums and zeroes the counters.

    python3 lab/explore_quant_tc.py --set first|fused|lesson   (writes $OUT/explore_quant_tc.json)

--set first: the first H100 run (results/h100-explore-quant-tc.json); fused: the second, the variant with no x-prep
kernel (h100-explore-quant-tc2.json); lesson: that variant as added to kernels.py (w4a16_tc_kernel), through
w4a16_gemv, beside the explored one (h100-explore-quant-tc3.json).
"""
import argparse
import json
import os
import platform
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

# What the lesson's kernel (gpucourse/quant/tensorcore.py, w4a16_tc_kernel) took from this script's
# fused variant, used from there: Marlin's pair dequantization, x's B tiles, the dot, the split-K store and counters.
from gpucourse.quant.kernels import _int4_pairs as pair_q
from gpucourse.quant.kernels import _split_k_store  # noqa: F401
from gpucourse.quant.kernels import _tc_dot as pdot
from gpucourse.quant.kernels import _tile_counters as counters
from gpucourse.quant.kernels import split_groups
from gpucourse.quant.kernels import _x_pairs as x_tile

OFFSET = 136.0  # a weight q is dequantized to q + 136 (bf16 128 + (u ^ 8))
MX = 16  # x columns in B (M <= 16), padded with zeros

# PTX for two int32 words a ($8), b ($9) -> 8 registers of bf16 pairs: register r holds nibble r of a (low half) and
# nibble r of b (high half), as 128 + (nibble ^ 8). prmt picks byte i of a into byte 0 and byte i of b into byte 2;
# lop3 (x & 0x000F000F) ^ 0x43084308 keeps the low nibble of each half, flips its top bit and sets the exponent of
# 128. Odd nibbles come from the words shifted right by 4.
_DQ_ASM = tl.constexpr("""{
.reg .b32 sa, sb, t;
shr.u32 sa, $8, 4;
shr.u32 sb, $9, 4;
prmt.b32 t, $8, $9, 0x4400; lop3.b32 $0, t, 0x000F000F, 0x43084308, 0x6A;
prmt.b32 t, sa, sb, 0x4400; lop3.b32 $1, t, 0x000F000F, 0x43084308, 0x6A;
prmt.b32 t, $8, $9, 0x5511; lop3.b32 $2, t, 0x000F000F, 0x43084308, 0x6A;
prmt.b32 t, sa, sb, 0x5511; lop3.b32 $3, t, 0x000F000F, 0x43084308, 0x6A;
prmt.b32 t, $8, $9, 0x6622; lop3.b32 $4, t, 0x000F000F, 0x43084308, 0x6A;
prmt.b32 t, sa, sb, 0x6622; lop3.b32 $5, t, 0x000F000F, 0x43084308, 0x6A;
prmt.b32 t, $8, $9, 0x7733; lop3.b32 $6, t, 0x000F000F, 0x43084308, 0x6A;
prmt.b32 t, sa, sb, 0x7733; lop3.b32 $7, t, 0x000F000F, 0x43084308, 0x6A;
}""")


@triton.jit
def nib(u, J: tl.constexpr):
    """Nibble J of each word as 128 + (nibble ^ 8) = q + 136, in bf16 (plain Triton: the interpreter's path)."""
    v = ((u >> (4 * J)) & 0xF) ^ 0x4308
    return v.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def dequant8(u, ASM: tl.constexpr):
    if ASM:
        return tl.inline_asm_elementwise(_DQ_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r", [u], dtype=(tl.bfloat16,) * 8,
                                         is_pure=True, pack=2)
    else:
        return nib(u, 0), nib(u, 1), nib(u, 2), nib(u, 3), nib(u, 4), nib(u, 5), nib(u, 6), nib(u, 7)


@triton.jit
def tc_prep_kernel(x_ptr, xt_ptr, xs_ptr, cnt_ptr, M, KW, n_cnt, stride_xm, OFF: tl.constexpr, MX: tl.constexpr,
                   CZ: tl.constexpr):
    """One program a group (16 words): xt[j, w, m] = x[m, 8w + j] (bf16, m >= M zero), xs[g, m] = OFF * sum of
    x[m, group g]; and counters cnt[g * CZ ...] zeroed."""
    g = tl.program_id(0)
    w = g * 16 + tl.arange(0, 16)
    j = tl.arange(0, 8)
    m = tl.arange(0, MX)
    w3 = w[:, None, None]
    j3 = j[None, :, None]
    m3 = m[None, None, :]
    xx = tl.load(x_ptr + m3 * stride_xm + 8 * w3 + j3, mask=(m3 < M) & (w3 < KW) & (j3 < 8), other=0.0)
    tl.store(xt_ptr + j3 * (KW * MX) + w3 * MX + m3, xx.to(tl.bfloat16), mask=(w3 < KW) & (j3 < 8) & (m3 < MX))
    xf = xx.to(tl.bfloat16).to(tl.float32)
    tl.store(xs_ptr + g * MX + m, OFF * tl.sum(tl.sum(xf, axis=1), axis=0))
    c = g * CZ + tl.arange(0, CZ)
    tl.store(cnt_ptr + c, tl.zeros((CZ,), dtype=tl.int32), mask=c < n_cnt)


@triton.jit
def tc_kernel(xt_ptr, xs_ptr, w_ptr, s_ptr, part_ptr, cnt_ptr, out_ptr, M, N, KW, stride_wn, stride_sn,
              stride_om, GPS, SPLIT, BLOCK_N: tl.constexpr, MX: tl.constexpr, ASM: tl.constexpr,
              NSTAGE: tl.constexpr, F32DOT: tl.constexpr = False):
    """Program (tile, split): rows tile*BLOCK_N.., groups split*GPS .. + GPS. w_ptr int32 words (N, KW)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    rw = tl.arange(0, 16)
    rm = tl.arange(0, MX)
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
    s_rows = s_ptr + rn.to(tl.int64) * stride_sn
    bt = xt_ptr + rw[:, None] * MX + rm[None, :]  # B_j tile of group g at bt + j*KW*MX + g*16*MX
    PL = KW * MX
    acc = tl.zeros((BLOCK_N, MX), dtype=tl.float32)
    g0 = pid_k * GPS
    for g in tl.range(g0, tl.minimum(g0 + GPS, KW // 16), num_stages=NSTAGE):
        u = tl.load(w_rows + (g * 16 + rw)[None, :], mask=n_ok[:, None], other=0)
        a0, a1, a2, a3, a4, a5, a6, a7 = dequant8(u, ASM)
        b = bt + g * (16 * MX)
        if F32DOT:  # the interpreter's bf16 tl.dot is wrong (triton-lang/triton#11584): float32 there, exact too
            part = tl.dot(a0.to(tl.float32), tl.load(b).to(tl.float32), input_precision="ieee")
            part = tl.dot(a1.to(tl.float32), tl.load(b + PL).to(tl.float32), part, input_precision="ieee")
            part = tl.dot(a2.to(tl.float32), tl.load(b + 2 * PL).to(tl.float32), part, input_precision="ieee")
            part = tl.dot(a3.to(tl.float32), tl.load(b + 3 * PL).to(tl.float32), part, input_precision="ieee")
            part = tl.dot(a4.to(tl.float32), tl.load(b + 4 * PL).to(tl.float32), part, input_precision="ieee")
            part = tl.dot(a5.to(tl.float32), tl.load(b + 5 * PL).to(tl.float32), part, input_precision="ieee")
            part = tl.dot(a6.to(tl.float32), tl.load(b + 6 * PL).to(tl.float32), part, input_precision="ieee")
            part = tl.dot(a7.to(tl.float32), tl.load(b + 7 * PL).to(tl.float32), part, input_precision="ieee")
        else:
            part = tl.dot(a0, tl.load(b))
            part = tl.dot(a1, tl.load(b + PL), part)
            part = tl.dot(a2, tl.load(b + 2 * PL), part)
            part = tl.dot(a3, tl.load(b + 3 * PL), part)
            part = tl.dot(a4, tl.load(b + 4 * PL), part)
            part = tl.dot(a5, tl.load(b + 5 * PL), part)
            part = tl.dot(a6, tl.load(b + 6 * PL), part)
            part = tl.dot(a7, tl.load(b + 7 * PL), part)
        s = tl.load(s_rows + g, mask=n_ok, other=0.0)
        xs = tl.load(xs_ptr + g * MX + rm)
        acc += (part - xs[None, :]) * s[:, None]
    # split-K: write this split's partial (MX, N) then count; the last split of the tile sums them in order
    _split_k_store(acc, part_ptr, cnt_ptr, out_ptr, pid_n, pid_k, rn, rm, n_ok[:, None] & (rm < M)[None, :],
                   N, stride_om, SPLIT)



@triton.jit
def gpd_dot(a, xt_ptr, PL, wl, wmask, rc, MP: tl.constexpr, J: tl.constexpr, acc, F32DOT: tl.constexpr):
    """acc += A_J @ B_J, B_J[wl, c] = x[c % MP, 8 w + J] where local word wl's group is c // MP, else 0."""
    b = tl.load(xt_ptr + J * PL + wl[:, None] * 16 + (rc % MP)[None, :],
                mask=wmask[:, None] & ((wl // 16)[:, None] == (rc // MP)[None, :]), other=0.0)
    if F32DOT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def tc_gpd_kernel(xt_ptr, xs_ptr, w_ptr, s_ptr, part_ptr, cnt_ptr, out_ptr, M, N, KW, stride_wn, stride_sn,
                  stride_om, SPS, SPLIT, BLOCK_N: tl.constexpr, MP: tl.constexpr,
                  GPD: tl.constexpr, ASM: tl.constexpr, NSTAGE: tl.constexpr, F32DOT: tl.constexpr = False):
    """GPD groups a step, in one dot a nibble plane: the 16 columns of B carry (group, row of x) pairs, GPD * MP = 16
    (M = 1: 16 groups a dot at most), so a group's partial lands in a column of its own and gets its scale there.
    SPS: steps a split."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    WS: tl.constexpr = 16 * GPD  # words a step
    rwl = tl.arange(0, WS)
    rc = tl.arange(0, 16)
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
    s_rows = s_ptr + rn.to(tl.int64)[:, None] * stride_sn
    PL = KW * 16
    n_groups = KW // 16
    acc = tl.zeros((BLOCK_N, 16), dtype=tl.float32)
    st0 = pid_k * SPS
    n_steps = tl.cdiv(n_groups, GPD)
    for st in tl.range(st0, tl.minimum(st0 + SPS, n_steps), num_stages=NSTAGE):
        w0 = st * WS
        wl = w0 + rwl
        wmask = wl < KW
        u = tl.load(w_rows + wl[None, :], mask=n_ok[:, None] & wmask[None, :], other=0)
        a0, a1, a2, a3, a4, a5, a6, a7 = dequant8(u, ASM)
        xb = xt_ptr + w0 * 16
        part = tl.zeros((BLOCK_N, 16), dtype=tl.float32)
        part = gpd_dot(a0, xb, PL, rwl, wmask, rc, MP, 0, part, F32DOT)
        part = gpd_dot(a1, xb, PL, rwl, wmask, rc, MP, 1, part, F32DOT)
        part = gpd_dot(a2, xb, PL, rwl, wmask, rc, MP, 2, part, F32DOT)
        part = gpd_dot(a3, xb, PL, rwl, wmask, rc, MP, 3, part, F32DOT)
        part = gpd_dot(a4, xb, PL, rwl, wmask, rc, MP, 4, part, F32DOT)
        part = gpd_dot(a5, xb, PL, rwl, wmask, rc, MP, 5, part, F32DOT)
        part = gpd_dot(a6, xb, PL, rwl, wmask, rc, MP, 6, part, F32DOT)
        part = gpd_dot(a7, xb, PL, rwl, wmask, rc, MP, 7, part, F32DOT)
        g = st * GPD + rc // MP
        c_ok = (rc // MP < GPD) & (g < n_groups)
        xs = tl.load(xs_ptr + g * 16 + rc % MP, mask=c_ok, other=0.0)
        s = tl.load(s_rows + g[None, :], mask=n_ok[:, None] & c_ok[None, :], other=0.0)
        acc += (part - xs[None, :]) * s
    y = tl.sum(tl.reshape(acc, (BLOCK_N, 16 // MP, MP)), axis=1)  # (BLOCK_N, MP): column c adds to row c % MP
    rm = tl.arange(0, MP)
    _split_k_store(y, part_ptr, cnt_ptr, out_ptr, pid_n, pid_k, rn, rm, n_ok[:, None] & (rm < M)[None, :],
                   N, stride_om, SPLIT)



# Pairs from one word (Marlin's order): a bf16 pair register holds nibbles j (low half) and j + 4 (high half) of
# the same word, bits 4j and 16 + 4j: one shift and one LOP3 a pair. The A tile is the words duplicated,
# (BLOCK_N, 32): element 2w + d is word w; Triton hands the asm the two elements of a pair (pack=2), and the asm reads
# the first only. NOT elementwise: correct only if each pack is a (2w, 2w+1) pair (the dot operand layout of a bf16
# A, kWidth 2, keeps k = 2c, 2c + 1 in one register; checked on the GPU).
@triton.jit
def pair_dq(ud, J: tl.constexpr, ASM: tl.constexpr):
    if ASM:
        if J == 0:
            return tl.inline_asm_elementwise("lop3.b32 $0, $1, 0x000F000F, 0x43084308, 0x6A;", "=r,r,r", [ud],
                                             dtype=tl.bfloat16, is_pure=True, pack=2)
        elif J == 1:
            return tl.inline_asm_elementwise(
                "{.reg .b32 t; shr.u32 t, $1, 4; lop3.b32 $0, t, 0x000F000F, 0x43084308, 0x6A;}",
                "=r,r,r", [ud], dtype=tl.bfloat16, is_pure=True, pack=2)
        elif J == 2:
            return tl.inline_asm_elementwise(
                "{.reg .b32 t; shr.u32 t, $1, 8; lop3.b32 $0, t, 0x000F000F, 0x43084308, 0x6A;}",
                "=r,r,r", [ud], dtype=tl.bfloat16, is_pure=True, pack=2)
        else:
            return tl.inline_asm_elementwise(
                "{.reg .b32 t; shr.u32 t, $1, 12; lop3.b32 $0, t, 0x000F000F, 0x43084308, 0x6A;}",
                "=r,r,r", [ud], dtype=tl.bfloat16, is_pure=True, pack=2)
    else:  # the same values: element 2w + d is nibble J + 4d of word w
        d = (tl.arange(0, ud.shape[1]) % 2)[None, :]
        v = ((ud >> (4 * J + 16 * d)) & 0xF) ^ 0x4308
        return v.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def pair_dot(a, xt_ptr, PL, rk, rm, J: tl.constexpr, acc, F32DOT: tl.constexpr):
    """acc += A'_J @ B'_J, B'_J[2w + d, m] = x[m, 8w + J + 4d] = plane J + 4d, word w."""
    b = tl.load(xt_ptr + (J + 4 * (rk % 2))[:, None] * PL + (rk // 2)[:, None] * 16 + rm[None, :])
    if F32DOT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def tc_pair_kernel(xt_ptr, xs_ptr, w_ptr, s_ptr, part_ptr, cnt_ptr, out_ptr, M, N, KW, stride_wn, stride_sn,
                   stride_om, GPS, SPLIT, BLOCK_N: tl.constexpr, MX: tl.constexpr,
                   ASM: tl.constexpr, NSTAGE: tl.constexpr, DUP: tl.constexpr, F32DOT: tl.constexpr = False):
    """tc_kernel with 4 dots of K = 32 a group (pairs from one word). DUP 0: words duplicated by join + reshape;
    1: by loading each word twice (addresses k // 2)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    rw = tl.arange(0, 16)
    rk = tl.arange(0, 32)
    rm = tl.arange(0, MX)
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
    s_rows = s_ptr + rn.to(tl.int64) * stride_sn
    PL = KW * MX
    acc = tl.zeros((BLOCK_N, MX), dtype=tl.float32)
    g0 = pid_k * GPS
    for g in tl.range(g0, tl.minimum(g0 + GPS, KW // 16), num_stages=NSTAGE):
        if DUP == 0:
            u = tl.load(w_rows + (g * 16 + rw)[None, :], mask=n_ok[:, None], other=0)
            ud = tl.reshape(tl.join(u, u), (BLOCK_N, 32))
        else:
            ud = tl.load(w_rows + (g * 16 + rk // 2)[None, :], mask=n_ok[:, None], other=0)
        xb = xt_ptr + g * (16 * MX)
        part = tl.zeros((BLOCK_N, MX), dtype=tl.float32)
        part = pair_dot(pair_dq(ud, 0, ASM), xb, PL, rk, rm, 0, part, F32DOT)
        part = pair_dot(pair_dq(ud, 1, ASM), xb, PL, rk, rm, 1, part, F32DOT)
        part = pair_dot(pair_dq(ud, 2, ASM), xb, PL, rk, rm, 2, part, F32DOT)
        part = pair_dot(pair_dq(ud, 3, ASM), xb, PL, rk, rm, 3, part, F32DOT)
        s = tl.load(s_rows + g, mask=n_ok, other=0.0)
        xs = tl.load(xs_ptr + g * MX + rm)
        acc += (part - xs[None, :]) * s[:, None]
    _split_k_store(acc, part_ptr, cnt_ptr, out_ptr, pid_n, pid_k, rn, rm, n_ok[:, None] & (rm < M)[None, :],
                   N, stride_om, SPLIT)



# The same with the offset taken out in the asm (Marlin's bf16 path): fma.rn.bf16x2 (v * 1 - 136) = q, exact, so the
# dot gives sum q x directly: no per-group correction, no sums of x. One more instruction a pair.
@triton.jit
def tc_fused_kernel(x_ptr, w_ptr, s_ptr, part_ptr, cnt_ptr, out_ptr, M, N, KW, stride_xm, stride_wn, stride_sn,
                    stride_om, GPS, SPLIT, BLOCK_N: tl.constexpr, MX: tl.constexpr,
                    ASM: tl.constexpr, NSTAGE: tl.constexpr, XPF: tl.constexpr = True, F32DOT: tl.constexpr = False):
    """The pairs kernel with no x-prep kernel: B read from x directly (XPF: the next group's x tiles loaded into
    registers before this group's dots: Triton does not pipeline these 2-byte gathers), values q from pair_q (no
    +136 correction). cnt_ptr: one counter a tile, zero on entry, left zero (the last split resets it)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    rw = tl.arange(0, 16)
    rk = tl.arange(0, 32)
    rm = tl.arange(0, MX)
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
    s_rows = s_ptr + rn.to(tl.int64) * stride_sn
    acc = tl.zeros((BLOCK_N, MX), dtype=tl.float32)
    g0 = pid_k * GPS
    g1 = tl.minimum(g0 + GPS, KW // 16)
    if XPF:
        b0 = x_tile(x_ptr, stride_xm, g0 * 128, rk, rm, M, 0)
        b1 = x_tile(x_ptr, stride_xm, g0 * 128, rk, rm, M, 1)
        b2 = x_tile(x_ptr, stride_xm, g0 * 128, rk, rm, M, 2)
        b3 = x_tile(x_ptr, stride_xm, g0 * 128, rk, rm, M, 3)
    for g in tl.range(g0, g1, num_stages=NSTAGE):
        u = tl.load(w_rows + (g * 16 + rw)[None, :], mask=n_ok[:, None], other=0)
        s = tl.load(s_rows + g, mask=n_ok, other=0.0)
        ud = tl.reshape(tl.join(u, u), (BLOCK_N, 32))
        if XPF:
            kn = tl.minimum(g + 1, g1 - 1) * 128  # the last step reloads its own group: harmless, in bounds
            c0 = x_tile(x_ptr, stride_xm, kn, rk, rm, M, 0)
            c1 = x_tile(x_ptr, stride_xm, kn, rk, rm, M, 1)
            c2 = x_tile(x_ptr, stride_xm, kn, rk, rm, M, 2)
            c3 = x_tile(x_ptr, stride_xm, kn, rk, rm, M, 3)
        else:
            b0 = x_tile(x_ptr, stride_xm, g * 128, rk, rm, M, 0)
            b1 = x_tile(x_ptr, stride_xm, g * 128, rk, rm, M, 1)
            b2 = x_tile(x_ptr, stride_xm, g * 128, rk, rm, M, 2)
            b3 = x_tile(x_ptr, stride_xm, g * 128, rk, rm, M, 3)
        part = pdot(pair_q(ud, 0, ASM), b0, tl.zeros((BLOCK_N, MX), dtype=tl.float32), F32DOT)
        part = pdot(pair_q(ud, 1, ASM), b1, part, F32DOT)
        part = pdot(pair_q(ud, 2, ASM), b2, part, F32DOT)
        part = pdot(pair_q(ud, 3, ASM), b3, part, F32DOT)
        acc += part * s[:, None]
        if XPF:
            b0, b1, b2, b3 = c0, c1, c2, c3
    _split_k_store(acc, part_ptr, cnt_ptr, out_ptr, pid_n, pid_k, rn, rm, n_ok[:, None] & (rm < M)[None, :],
                   N, stride_om, SPLIT)


INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def tc_prepare(x, n, split_tiles):
    """x (M, K) -> (xt planes (8, K/8, 16) bf16, xs (K/128, 16) float32, counters (split_tiles,) int32 zeroed)."""
    m, k = x.shape
    kw = k // 8
    groups = k // 128
    xt = torch.empty(8, kw, MX, dtype=torch.bfloat16, device=x.device)
    xs = torch.empty(groups, MX, dtype=torch.float32, device=x.device)
    cnt = torch.empty(max(split_tiles, 1), dtype=torch.int32, device=x.device)
    cz = triton.next_power_of_2(triton.cdiv(cnt.numel(), groups))
    tc_prep_kernel[(groups,)](x, xt, xs, cnt, m, kw, cnt.numel(), x.stride(0), OFF=OFFSET, MX=MX, CZ=cz,
                              num_warps=4)
    return xt, xs, cnt


def _launch_setup(x, packed, steps, split, block_n):
    """What every wrapper below needs: (m, n, words, split, steps per split, tiles, out, part)."""
    m, k = x.shape
    n = packed.shape[0]
    assert m <= MX and k % 128 == 0
    split, per = split_groups(steps, split)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    part = torch.empty(split, MX, n, dtype=torch.float32, device=x.device) if split > 1 else out
    return m, n, packed.view(torch.int32), split, per, triton.cdiv(n, block_n), out, part


def w4_tc(x, packed, scales, block_n=128, split=8, warps=4, nstage=3, asm=None):
    """x (M <= 16, K) bf16 @ dequant(packed, scales, group 128).T -> (M, N) bf16."""
    m, n, words, split, gps, tiles, out, part = _launch_setup(x, packed, x.shape[1] // 128, split, block_n)
    kw = words.shape[1]
    xt, xs, cnt = tc_prepare(x, n, tiles)
    asm = not INTERPRETED if asm is None else asm
    tc_kernel[(tiles, split)](xt, xs, words, scales, part, cnt, out, m, n, kw, words.stride(0), scales.stride(0),
                              out.stride(0), gps, split, BLOCK_N=block_n, MX=MX, ASM=asm, NSTAGE=nstage,
                              F32DOT=INTERPRETED, num_warps=warps)
    return out


def w4_tc_gpd(x, packed, scales, block_n=64, gpd=None, split=8, warps=4, nstage=3, asm=None):
    """The GPD-groups-a-dot variant; gpd defaults to 16 // MP (MP: M rounded up to a power of two)."""
    mp = triton.next_power_of_2(x.shape[0])
    gpd = gpd or 16 // mp
    assert gpd * mp <= 16
    steps = triton.cdiv(x.shape[1] // 128, gpd)
    m, n, words, split, sps, tiles, out, part = _launch_setup(x, packed, steps, split, block_n)
    kw = words.shape[1]
    xt, xs, cnt = tc_prepare(x, n, tiles)
    asm = not INTERPRETED if asm is None else asm
    tc_gpd_kernel[(tiles, split)](xt, xs, words, scales, part, cnt, out, m, n, kw, words.stride(0),
                                  scales.stride(0), out.stride(0), sps, split, BLOCK_N=block_n,
                                  MP=mp, GPD=gpd, ASM=asm, NSTAGE=nstage, F32DOT=INTERPRETED, num_warps=warps)
    return out


def w4_tc_pair(x, packed, scales, block_n=128, split=8, warps=4, nstage=3, dup=0, asm=None):
    m, n, words, split, gps, tiles, out, part = _launch_setup(x, packed, x.shape[1] // 128, split, block_n)
    kw = words.shape[1]
    xt, xs, cnt = tc_prepare(x, n, tiles)
    asm = not INTERPRETED if asm is None else asm
    tc_pair_kernel[(tiles, split)](xt, xs, words, scales, part, cnt, out, m, n, kw, words.stride(0),
                                   scales.stride(0), out.stride(0), gps, split, BLOCK_N=block_n,
                                   MX=MX, ASM=asm, NSTAGE=nstage, DUP=dup, F32DOT=INTERPRETED, num_warps=warps)
    return out


def w4_tc_fused(x, packed, scales, block_n=128, split=8, warps=4, nstage=3, xpf=True, asm=None):
    x = x.contiguous()
    m, n, words, split, gps, tiles, out, part = _launch_setup(x, packed, x.shape[1] // 128, split, block_n)
    kw = words.shape[1]
    cnt = counters(x.device, tiles)
    asm = not INTERPRETED if asm is None else asm
    tc_fused_kernel[(tiles, split)](x, words, scales, part, cnt, out, m, n, kw, x.stride(0), words.stride(0),
                                    scales.stride(0), out.stride(0), gps, split,
                                    BLOCK_N=block_n, MX=MX, ASM=asm, NSTAGE=nstage, XPF=xpf,
                                    F32DOT=INTERPRETED, num_warps=warps)
    return out


def split_for(tiles, target):
    """SPLIT so that tiles * SPLIT is about ``target`` programs."""
    return max(1, round(target / tiles))


def variants(n, k, which="fused"):
    """name -> (fn, kwargs) of every variant timed on shape (N, K); fn(x, packed, scales, **kwargs). ``which``:
    "first" (the first H100 run: planes, pairs, gpd, all with the x-prep kernel) or "fused" (the second: no prep
    kernel, against the first run's best two)."""
    out = {}

    def sp(bn, t):
        return split_for(triton.cdiv(n, bn), t)

    if which == "lesson":  # the path added to kernels.py, through w4a16_gemv, against the explored kernel
        from gpucourse.quant import kernels
        out["kernels.py tc (w4a16_gemv default)"] = (lambda x, p, s: kernels.w4a16_gemv(x, p, s, 128), {})
        out["fused BN128 ns3 T528"] = (w4_tc_fused, dict(block_n=128, split=sp(128, 528), warps=4, nstage=3))
        return out
    if which == "fused":
        out["pair BN128 ns4 T264"] = (w4_tc_pair, dict(block_n=128, split=sp(128, 264), warps=4, nstage=4))
        out["pair BN64 ns3 T528"] = (w4_tc_pair, dict(block_n=64, split=sp(64, 528), warps=4, nstage=3))
        for bn in (64, 128, 256):
            for t in (264, 528, 1056):
                out[f"fused BN{bn} ns3 T{t}"] = (w4_tc_fused, dict(block_n=bn, split=sp(bn, t), warps=4, nstage=3))
        out["fused BN128 ns3 T528 no-xpf"] = (w4_tc_fused, dict(block_n=128, split=sp(128, 528), warps=4, nstage=3,
                                                                xpf=False))
        for ns in (2, 4):
            out[f"fused BN128 ns{ns} T528"] = (w4_tc_fused, dict(block_n=128, split=sp(128, 528), warps=4,
                                                                 nstage=ns))
        out["fused BN64 ns4 T528"] = (w4_tc_fused, dict(block_n=64, split=sp(64, 528), warps=4, nstage=4))
        return out

    for bn, t in ((64, 528), (64, 1056), (128, 528), (128, 1056), (256, 528), (256, 1056)):
        out[f"planes BN{bn} ns3 T{t}"] = (w4_tc, dict(block_n=bn, split=sp(bn, t), warps=4, nstage=3))
    out["planes BN128 w8 ns3 T528"] = (w4_tc, dict(block_n=128, split=sp(128, 528), warps=8, nstage=3))
    for bn in (64, 128, 256):
        for t in (264, 528, 1056):
            out[f"pair BN{bn} ns3 T{t}"] = (w4_tc_pair, dict(block_n=bn, split=sp(bn, t), warps=4, nstage=3))
    for t in (264, 528, 1056):
        out[f"pair BN128 ns4 T{t}"] = (w4_tc_pair, dict(block_n=128, split=sp(128, t), warps=4, nstage=4))
    for bn in (128, 256):
        out[f"pair-dup1 BN{bn} ns3 T528"] = (w4_tc_pair, dict(block_n=bn, split=sp(bn, 528), warps=4, nstage=3,
                                                              dup=1))
    for bn, t in ((128, 528), (128, 1056), (64, 1056)):
        out[f"gpd BN{bn} G4 ns1 T{t}"] = (w4_tc_gpd, dict(block_n=bn, gpd=4, split=sp(bn, t), warps=4, nstage=1))
    return out


def main():
    from gpucourse.lessons.l07_quantization import measure
    from gpucourse.quant import kernels, packing
    from gpucourse.timing import interleaved

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "explore_quant_tc.json"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--set", default="fused", choices=("first", "fused", "lesson"))
    args = ap.parse_args()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "set": args.set, "checks": [],
           "rows": []}

    def save():
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    gen = torch.Generator().manual_seed(0)
    # correctness, on the GPU's compiler (the inline-asm dequantization cannot run in the interpreter)
    for m, n, k in ((1, 77, 384), (3, 200, 1024), (16, 130, 640), (1, 4099, 4096)):
        d = measure.quantized_weights(n, k, 128, gen)
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        w = packing.unpack_int4_torch(d["packed"]).double() * d["s4"].double().repeat_interleave(128, 1)
        ref = x.double() @ w.T
        row = {"shape": [m, n, k]}
        for name, (fn, kw) in {"rows": (lambda x, p, s: kernels.w4a16_gemv(x, p, s, 128, tc=False), {}),
                               "kernels.py default": (lambda x, p, s: kernels.w4a16_gemv(x, p, s, 128), {}),
                               "tc BN64 split3": (w4_tc, dict(block_n=64, split=3)),
                               "tc BN128": (w4_tc, dict(block_n=128, split=1)),
                               "tc BN256 split5": (w4_tc, dict(block_n=256, split=5)),
                               "gpd BN64 G4 split2": (w4_tc_gpd, dict(block_n=64, gpd=4 if m == 1 else None, split=2)),
                               "gpd BN128": (w4_tc_gpd, dict(block_n=128, split=1)),
                               "pair BN64 split3": (w4_tc_pair, dict(block_n=64, split=3)),
                               "pair BN128": (w4_tc_pair, dict(block_n=128, split=1)),
                               "pair BN256 split5 ns4": (w4_tc_pair, dict(block_n=256, split=5, nstage=4)),
                               "pair-dup1 BN128 split2": (w4_tc_pair, dict(block_n=128, split=2, dup=1)),
                               "fused BN64 split3": (w4_tc_fused, dict(block_n=64, split=3)),
                               "fused BN128": (w4_tc_fused, dict(block_n=128, split=1)),
                               "fused BN128 split4 no-xpf": (w4_tc_fused, dict(block_n=128, split=4, xpf=False)),
                               "fused BN256 split5": (w4_tc_fused, dict(block_n=256, split=5))}.items():
            try:
                y = fn(x, d["packed"], d["s4"], **kw).double()
                row[name] = float((y - ref).abs().max() / ref.abs().max())
                if name.startswith("fused"):  # a second call: the counters were left zero
                    row[name + " again, max abs diff"] = float((fn(x, d["packed"], d["s4"], **kw).double()
                                                                - y).abs().max())
            except Exception as exc:
                row[name] = f"error: {str(exc)[:300]}"
        res["checks"].append(row)
        print(json.dumps(row), flush=True)
        save()
    for n, k in measure.SHAPES:
        d = measure.quantized_weights(n, k, 128, gen)
        x = torch.randn(1, k, generator=gen).to(torch.bfloat16).cuda()
        p4, s4 = d["packed"], d["s4"]
        fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"]),
               "rows (kernels.py)": lambda: kernels.w4a16_gemv(x, p4, s4, 128, tc=False)}
        y0 = kernels.w4a16_gemv(x, p4, s4, 128, tc=False).double()
        err = {}
        for name, (fn, kw) in variants(n, k, args.set).items():
            try:
                y = fn(x, p4, s4, **kw).double()
                err[name] = float((y - y0).abs().max() / y0.abs().max())
                fns[name] = lambda fn=fn, kw=kw: fn(x, p4, s4, **kw)
            except Exception as exc:  # a config that does not compile: say so, time the rest
                err[name] = f"error: {str(exc)[:200]}"
        tiles = triton.cdiv(n, 128)
        fns["x-prep kernel alone"] = lambda: tc_prepare(x, n, tiles)
        timed = interleaved(fns, rounds=args.rounds, flush_l2="read")
        us = {name: r.median_ms * 1e3 for name, r in timed.items()}
        bf = us["bf16 cuBLAS"]
        res["rows"].append({"shape": [n, k], "us": us, "x_bf16": {nm: bf / v for nm, v in us.items()},
                            "rel_diff_vs_rows": err})
        print(f"{n}x{k}: bf16 {bf:.1f} us", flush=True)
        for nm, v in sorted(us.items(), key=lambda i: i[1]):
            print(f"   {nm:32s} {v:7.1f} us  {bf / v:5.2f}x  {err.get(nm, '')}", flush=True)
        save()
    summary = {}
    for row in res["rows"]:
        for nm, r in row["x_bf16"].items():
            summary.setdefault(nm, []).append(r)
    res["min_ratio_over_shapes"] = dict(sorted(((nm, min(v)) for nm, v in summary.items() if len(v) == 3),
                                               key=lambda i: -i[1]))
    print("min ratio over the three shapes:")
    for nm, r in list(res["min_ratio_over_shapes"].items())[:12]:
        print(f"   {nm:32s} {r:5.2f}x")
    save()


if __name__ == "__main__":
    main()
