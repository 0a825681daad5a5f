#!/usr/bin/env python3
"""Exploration behind issue #15, fifteenth round: the tile-major tc kernel at M = 1, filling the H100.

Nsight Compute on the lesson's tile-major kernel (kernels.w4a16_tc_kernel, TILED; 8192 x 8192, 20.6 µs under the
profiler) saw DRAM 54% busy, 0.78 waves (512 programs of 128 threads where 660 fit: 5 a SM, registers the limit),
0.88 eligible warps a scheduler and an instruction issued on 46% of cycles: too few loads in flight. Two ways to put
more in flight, timed here against the lesson's configuration:

* more programs or more stages: CTAS_PER_SM 5-6 (one full wave), NSTAGE 4, 64-row programs (fewer registers);
* the tensor memory accelerator: the words of a step (one contiguous (BLOCK_N, words) tile of the tile-major
  layout) loaded through a TMA descriptor (``triton.tools.tensor_descriptor``), which needs no registers or address
  arithmetic for the loads in flight; Triton pipelines those loads over NSTAGE steps as it does pointer loads.

M = 1, interleaved rounds, L2 flushed by a read, bf16 cuBLAS in the same rounds.

H100 run (results/h100-explore-quant-tma.json): none was faster than the lesson's configuration by more than
0.1 µs on any of the four shapes (8192 x 8192: lesson 20.2 µs, TMA with 3 stages 20.9, one full wave of programs
21.2, 4 stages 21.4). Again after the script took the lesson's group helpers (-tma2.json): lesson 20.0, TMA 20.6.

    python3 benchmarks/explore_quant_tma.py   (writes $OUT/explore_quant_tma.json)
"""
import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from gpucourse.lessons.l07_quantization import kernels, measure  # noqa: E402
from gpucourse.lessons.l07_quantization.kernels import _group_dot, _split_k_store, _x_group  # noqa: E402
from gpucourse.timing import interleaved  # noqa: E402

GS = 128


@triton.jit
def tc_tma_kernel(x_ptr, w_desc, s_ptr, part_ptr, cnt_ptr, out_ptr, M, N, KW, stride_xm, stride_om, GPS, SPLIT,
                  GROUP: tl.constexpr, BLOCK_N: tl.constexpr, MX: tl.constexpr, NSTAGE: tl.constexpr,
                  TB: tl.constexpr):
    """kernels.w4a16_tc_kernel's TILED branch with the words loaded through a TMA descriptor over the tile-major
    words seen as rows of one group's words ((blocks * groups * TB, words a group))."""
    WPG: tl.constexpr = GROUP // 8
    KP: tl.constexpr = 2 * WPG
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n_groups = KW // WPG
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    rk = tl.arange(0, KP)
    rm = tl.arange(0, MX)
    blk = (pid_n * BLOCK_N) // TB
    r0 = (pid_n * BLOCK_N) % TB
    s_tile = s_ptr + blk.to(tl.int64) * n_groups * TB + r0 + tl.arange(0, BLOCK_N)
    row0 = blk * n_groups * TB + r0
    acc = tl.zeros((BLOCK_N, MX), dtype=tl.float32)
    g0 = pid_k * GPS
    g1 = tl.minimum(g0 + GPS, n_groups)
    b0, b1, b2, b3 = _x_group(x_ptr, stride_xm, g0 * GROUP, rk, rm, M)
    for g in tl.range(g0, g1, num_stages=NSTAGE):
        u = w_desc.load([row0 + g * TB, 0])  # the one change from the lesson kernel
        s = tl.load(s_tile + g * TB)
        ud = tl.reshape(tl.join(u, u), (BLOCK_N, KP))
        kn = tl.minimum(g + 1, g1 - 1) * GROUP
        c0, c1, c2, c3 = _x_group(x_ptr, stride_xm, kn, rk, rm, M)
        acc += _group_dot(ud, b0, b1, b2, b3, True, False) * s[:, None]
        b0, b1, b2, b3 = c0, c1, c2, c3
    _split_k_store(acc, part_ptr, cnt_ptr, out_ptr, pid_n, pid_k, rn, rm, n_ok[:, None] & (rm < M)[None, :], N,
                   stride_om, SPLIT)


def tma_gemv(x, t, block_n=128, nstage=3, ctas=4, warps=4):
    m, k = x.shape
    wpg = t.group_size // 8
    tiles = triton.cdiv(t.n, block_n)
    split, gps = kernels.tc_split({"CTAS_PER_SM": ctas}, tiles, k // t.group_size, x.device)
    out = torch.empty(m, t.n, dtype=x.dtype, device=x.device)
    part = torch.empty(split, 16, t.n, dtype=torch.float32, device=x.device) if split > 1 else out
    desc = TensorDescriptor.from_tensor(t.words.view(-1, wpg), [block_n, wpg])
    tc_tma_kernel[(tiles, split)](x, desc, t.scales, part, kernels._tile_counters(x.device, tiles), out, m, t.n,
                                  k // 8, x.stride(0), out.stride(0), gps, split, GROUP=t.group_size, BLOCK_N=block_n,
                                  MX=16, NSTAGE=nstage, TB=t.block, num_warps=warps)
    return out


def variants():
    out = {"lesson (tiled T4 ns3)": lambda x, t: kernels.w4a16_tiled(x, t)}
    for bn, ns, c in ((128, 3, 5), (128, 3, 6), (128, 4, 4), (128, 4, 5), (64, 3, 8), (64, 4, 10), (64, 3, 10)):
        out[f"tiled BN{bn} ns{ns} T{c}"] = (lambda x, t, bn=bn, ns=ns, c=c:
                                             kernels.w4a16_tiled(x, t, BLOCK_N=bn, NSTAGE=ns, CTAS_PER_SM=c))
    for bn, ns, c in ((128, 3, 4), (128, 4, 4), (128, 5, 4), (128, 6, 4), (128, 4, 5), (128, 6, 2), (64, 4, 8),
                      (64, 6, 8)):
        out[f"tma BN{bn} ns{ns} T{c}"] = lambda x, t, bn=bn, ns=ns, c=c: tma_gemv(x, t, bn, ns, c)
    return out


def time_m1(variants, out_path, rounds):
    """Time every ``name -> fn(x, tiled)`` of ``variants`` at M = 1 on the lesson's shapes and the MLP's up
    projection, beside bf16 cuBLAS, each checked against the lesson kernel first; write ``out_path`` as it goes."""
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "flush": "read", "rows": []}
    gen = torch.Generator().manual_seed(0)
    for n, k in measure.SHAPES + ((28672, 4096),):
        d = measure.quantized_weights(n, k, GS, gen)
        x = torch.randn(1, k, generator=gen).to(torch.bfloat16).cuda()
        t = kernels.tile_major(d["packed"], d["s4"], GS)
        y0 = kernels.w4a16_tiled(x, t).double()
        fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"])}
        diff = {}
        for name, fn in variants.items():
            try:
                diff[name] = float((fn(x, t).double() - y0).abs().max() / y0.abs().max())
                fns[name] = lambda fn=fn: fn(x, t)
            except Exception as exc:
                diff[name] = f"error: {str(exc)[:300]}"
                print(name, diff[name], flush=True)
        us = {nm: r.median_ms * 1e3 for nm, r in interleaved(fns, rounds=rounds, flush_l2="read").items()}
        bf = us["bf16 cuBLAS"]
        res["rows"].append({"shape": [n, k], "us": us, "x_bf16": {nm: bf / v for nm, v in us.items()},
                            "rel_diff_vs_lesson": diff})
        print(f"{n}x{k}: bf16 {bf:.1f} us", flush=True)
        for nm, v in sorted(us.items(), key=lambda i: i[1])[:9]:
            print(f"   {nm:28s} {v:7.1f} us  {bf / v:5.2f}x  {diff.get(nm, '')}", flush=True)
        print(f"   {'lesson (tiled T4 ns3)':28s} {us['lesson (tiled T4 ns3)']:7.1f} us", flush=True)
        with open(out_path, "w") as f:
            json.dump(res, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "explore_quant_tma.json"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    time_m1(variants(), args.out, args.rounds)


if __name__ == "__main__":
    main()
