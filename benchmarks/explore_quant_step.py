#!/usr/bin/env python3
"""Exploration behind issue #15, sixteenth round: the tile-major tc kernel's step at M = 1.

Round fifteen (explore_quant_tma.py) found that more programs, more stages or TMA loads do not make the lesson's
tile-major kernel (kernels.w4a16_tc_kernel, TILED) faster. What is left is the step itself: per group, a pipelined
load and its barrier, a join + reshape that duplicates each word (element 2w + d = word w, for the pair asm), four
dots each waited for, and the scale. Two variants, as copies of the lesson kernel:

* ``dup``: the words loaded already duplicated (column c of the tile reads word c // 2), so no join/reshape in
  registers; the pipeline then stages twice the bytes in shared memory;
* ``G2``: two groups a step (8 dots, two scales), half the steps and barriers; a split's odd last group is masked
  (zero words, zero scale).

M = 1, interleaved rounds, L2 flushed by a read, bf16 cuBLAS in the same rounds.

H100 runs (results/h100-explore-quant-step.json; -step2.json after the script took the lesson's group helpers):
both lose. The copy of the lesson kernel without its x prefetch (x's tiles for the next group loaded during this
group's dots) is already 11-15% (6-10% in the second run) slower than the lesson's; two groups a step is slower
again, and duplicated loads take 2.4 to 3.2 times as long as that copy.

    python3 benchmarks/explore_quant_step.py   (writes $OUT/explore_quant_step.json)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from explore_quant_tma import time_m1  # noqa: E402  (the same shapes, checks and timing as round fifteen)
from gpucourse.lessons.l07_quantization import kernels  # noqa: E402
from gpucourse.lessons.l07_quantization.kernels import _group_dot, _split_k_store, _x_group  # noqa: E402


@triton.jit
def tc_step_kernel(x_ptr, w_ptr, s_ptr, part_ptr, cnt_ptr, out_ptr, M, N, KW, stride_xm, stride_om, GPS, SPLIT,
                   GROUP: tl.constexpr, BLOCK_N: tl.constexpr, MX: tl.constexpr, NSTAGE: tl.constexpr,
                   TB: tl.constexpr, DUP: tl.constexpr, G2: tl.constexpr, IN: tl.constexpr):
    WPG: tl.constexpr = GROUP // 8
    KP: tl.constexpr = 2 * WPG
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n_groups = KW // WPG
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    rw = tl.arange(0, WPG)
    rk = tl.arange(0, KP)
    rm = tl.arange(0, MX)
    blk = (pid_n * BLOCK_N) // TB
    r0 = (pid_n * BLOCK_N) % TB + tl.arange(0, BLOCK_N)
    base = w_ptr + blk.to(tl.int64) * n_groups * (TB * WPG) + (r0 * WPG)[:, None]
    if DUP:
        w_tile = base + (rk // 2)[None, :]
    else:
        w_tile = base + rw[None, :]
    s_tile = s_ptr + blk.to(tl.int64) * n_groups * TB + r0
    acc = tl.zeros((BLOCK_N, MX), dtype=tl.float32)
    g0 = pid_k * GPS
    g1 = tl.minimum(g0 + GPS, n_groups)
    if G2:
        for g in tl.range(g0, g1, 2, num_stages=NSTAGE):
            more = (g + 1 + tl.zeros((BLOCK_N,), dtype=tl.int32)) < g1  # a split's odd last group: none
            ua = tl.load(w_tile + g * (TB * WPG))
            ub = tl.load(w_tile + (g + 1) * (TB * WPG), mask=more[:, None], other=0)
            sa = tl.load(s_tile + g * TB)
            sb = tl.load(s_tile + (g + 1) * TB, mask=more, other=0.0)
            if DUP:
                uda = ua
                udb = ub
            else:
                uda = tl.reshape(tl.join(ua, ua), (BLOCK_N, KP))
                udb = tl.reshape(tl.join(ub, ub), (BLOCK_N, KP))
            kb = tl.minimum(g + 1, g1 - 1) * GROUP
            xa0, xa1, xa2, xa3 = _x_group(x_ptr, stride_xm, g * GROUP, rk, rm, M)
            xb0, xb1, xb2, xb3 = _x_group(x_ptr, stride_xm, kb, rk, rm, M)
            acc += _group_dot(uda, xa0, xa1, xa2, xa3, not IN, IN) * sa[:, None] + \
                _group_dot(udb, xb0, xb1, xb2, xb3, not IN, IN) * sb[:, None]
    else:
        for g in tl.range(g0, g1, num_stages=NSTAGE):
            u = tl.load(w_tile + g * (TB * WPG))
            s = tl.load(s_tile + g * TB)
            if DUP:
                ud = u
            else:
                ud = tl.reshape(tl.join(u, u), (BLOCK_N, KP))
            x0, x1, x2, x3 = _x_group(x_ptr, stride_xm, g * GROUP, rk, rm, M)  # no prefetch: see the docstring
            acc += _group_dot(ud, x0, x1, x2, x3, not IN, IN) * s[:, None]
    _split_k_store(acc, part_ptr, cnt_ptr, out_ptr, pid_n, pid_k, rn, rm, n_ok[:, None] & (rm < M)[None, :], N,
                   stride_om, SPLIT)


def step_gemv(x, t, dup=False, g2=False, block_n=128, nstage=3, ctas=4, warps=4, split=None):
    m, k = x.shape
    groups = k // t.group_size
    tiles = triton.cdiv(t.n, block_n)
    split, gps = kernels.tc_split({"SPLIT": split} if split else {"CTAS_PER_SM": ctas}, tiles, groups, x.device)
    if g2 and gps % 2:  # whole pairs a split, but the last
        split, gps = triton.cdiv(groups, gps + 1), gps + 1
    out = torch.empty(m, t.n, dtype=x.dtype, device=x.device)
    part = torch.empty(split, 16, t.n, dtype=torch.float32, device=x.device) if split > 1 else out
    tc_step_kernel[(tiles, split)](x, t.words, t.scales, part, kernels._tile_counters(x.device, tiles), out, m,
                                   t.n, k // 8, x.stride(0), out.stride(0), gps, split, GROUP=t.group_size,
                                   BLOCK_N=block_n, MX=16, NSTAGE=nstage, TB=t.block, DUP=dup, G2=g2,
                                   IN=kernels.INTERPRETED, num_warps=warps)
    return out


def variants():
    out = {"lesson (tiled T4 ns3)": lambda x, t: kernels.w4a16_tiled(x, t),
           "copy of lesson": lambda x, t: step_gemv(x, t)}
    for dup, g2 in ((True, False), (False, True), (True, True)):
        for ns, c in ((3, 4), (2, 4), (3, 2), (4, 4)):
            name = f"{'dup ' if dup else ''}{'G2 ' if g2 else ''}ns{ns} T{c}"
            out[name] = lambda x, t, dup=dup, g2=g2, ns=ns, c=c: step_gemv(x, t, dup, g2, nstage=ns, ctas=c)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "explore_quant_step.json"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    time_m1(variants(), args.out, args.rounds)


if __name__ == "__main__":
    main()
