"""Can an int4 weight-only GEMV at M = 1 reach 0.9x tinygemm on an H100 without inline PTX?

Issue #31 asks the workbook's int4 answer for 0.9x ``torch._weight_int4pack_mm`` (tinygemm) with no inline PTX. The
workbook's rows kernel (CUDA cores, magic-number conversion) tops out at 0.83-0.87x over 36 launch configurations
(``explore_quant_workbook_int4.py``). This script tries the other family: lesson 07's tensor-core kernel with its
int4 -> bf16 conversion written in plain Triton instead of its inline PTX pair conversion. Variants of the
conversion (``VARIANTS``), each in its own process (``--variant``), on the row layout and the tile-major one
(``--tiled``): "asm" (the lesson's PTX, for reference), "plain" (the lesson's fallback branch: int -> float32 ->
bf16), "p16" (the nibble ORed into the bf16 128 + 8 and bitcast through int16, one bf16 subtraction), "p16f" (the
same through the float32 2**23). Each process times tinygemm, bf16 cuBLAS, the workbook's solved int4_gemv and the
variant in 5 interleaved rounds (L2 emptied by a read before each repeat) on the lesson's three shapes.

Run on the device from the repository root: ``for t in 0 1; do for v in asm plain p16 p16f; do python3
lab/explore_int4_no_ptx.py --variant $v --tiled $t; done; done``; each writes
``$OUT/int4_no_ptx_<variant>_<tiled>.json``, merged into ``lab/results/h100-explore-int4-no-ptx.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

from gpucourse.quant import kernels
from gpucourse.solutions import cached_solutions
from gpucourse.timing import interleaved

SHAPES = ((8192, 8192), (14336, 4096), (4096, 14336))
GROUP = 128


@triton.jit
def pairs_p16(ud, J: tl.constexpr, ASM: tl.constexpr):
    d = (tl.arange(0, ud.shape[1]) % 2)[None, :]
    t = ((ud >> (4 * J + 16 * d)) & 0xF) ^ 0x4308  # 0x4300 | (q + 8): the bf16 128 + q + 8
    return t.to(tl.int16).to(tl.bfloat16, bitcast=True) - 136.0


@triton.jit
def pairs_p16f(ud, J: tl.constexpr, ASM: tl.constexpr):
    d = (tl.arange(0, ud.shape[1]) % 2)[None, :]
    t = (((ud >> (4 * J + 16 * d)) & 0xF) | 0x4B000000) ^ 8  # the float 2**23 + q + 8
    return (t.to(tl.float32, bitcast=True) - 8388616.0).to(tl.bfloat16)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=("asm", "plain", "p16", "p16f"), required=True)
    ap.add_argument("--tiled", type=int, choices=(0, 1), default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (Hopper: the tensor-core kernel's layout assumptions)")
        return 0
    # the module that holds the tensor-core kernel (kernels.py re-exports it)
    tc = sys.modules[kernels.w4a16_tc_kernel.fn.__module__]
    orig = tc._int4_pairs
    pairs = {"asm": orig, "plain": orig, "p16": pairs_p16, "p16f": pairs_p16f}[args.variant]
    asm = args.variant != "plain"  # the plain-Triton variants ignore the flag
    tc._int4_pairs = pairs  # resolved when the kernel compiles, below: this process compiles this variant only
    kern = tc.w4a16_tc_kernel
    workbook = cached_solutions("07_quantization")["int4_gemv"]
    out = {"variant": args.variant, "tiled": bool(args.tiled), "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "triton": triton.__version__, "shapes": {}}
    for n, k in SHAPES:
        torch.manual_seed(0)
        w = torch.randn(n, k, device="cuda").view(n, k // GROUP, GROUP)
        scales = (w.abs().amax(-1) / 7).float().contiguous()
        q = (w / scales[..., None]).round().clamp(-8, 7).view(n, k).to(torch.int8)
        packed = (((q[:, 1::2] & 0xF) << 4) | (q[:, 0::2] & 0xF)).to(torch.uint8).contiguous()
        wdq = (q.view(n, k // GROUP, GROUP).float() * scales[..., None]).view(n, k).to(torch.bfloat16)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        ref = x.float() @ wdq.float().t()
        tb = packed ^ 0x88  # tinygemm's bytes: u = q + 8, column 2j in the high nibble
        tb = ((tb & 0x0F) << 4) | (tb >> 4)
        tw = torch._convert_weight_to_int4pack(tb.contiguous(), 8)
        sz = torch.stack((scales.t().to(torch.bfloat16), torch.zeros(scales.t().shape, dtype=torch.bfloat16,
                                                                      device="cuda")), 2).contiguous()
        c = tc.tc_config(1)
        tiles = triton.cdiv(n, c["BLOCK_N"])
        split, gps = tc.tc_split(c, tiles, k // GROUP, x.device)
        part = torch.empty(1, split, c["MX"], n, dtype=torch.float32, device="cuda")
        cnt = tc._tile_counters(x.device, tiles)
        o = torch.empty(1, n, dtype=x.dtype, device="cuda")
        if args.tiled:
            t = tc.tile_major(packed, scales, GROUP, 128)
            ww, ss, swn, ssn, tb_rows = t.words, t.scales, 0, 0, 128
        else:
            ww, ss = tc._words(packed), scales
            swn, ssn, tb_rows = ww.stride(0), ss.stride(0), c["BLOCK_N"]

        def variant():
            kern[(tiles, split, 1)](x, ww, ss, part, cnt, o, 1, n, k // 8, x.stride(0), swn, ssn, o.stride(0), gps,
                                    split, GROUP=GROUP, BLOCK_N=c["BLOCK_N"], MX=c["MX"], NSTAGE=c["NSTAGE"],
                                    ASM=asm, INTERPRETED=False, TILED=bool(args.tiled), TB=tb_rows,
                                    num_warps=c.get("num_warps", 4))
            return o

        fns = {"bf16 cuBLAS": lambda: x @ wdq.t(), "tinygemm": lambda: torch._weight_int4pack_mm(x, tw, GROUP, sz),
               "workbook rows": lambda: workbook(x, packed, scales, GROUP), f"tc {args.variant}": variant}
        err = {name: float(((fn().float() - ref).abs().max() / ref.abs().max()).item()) for name, fn in fns.items()}
        r = interleaved(fns, rounds=5, flush_l2="read", rep_ms=50)
        us = {name: rr.median_ms * 1e3 for name, rr in r.items()}
        out["shapes"][f"{n}x{k}"] = {"us": us, "vs_tinygemm": {nm: us["tinygemm"] / v for nm, v in us.items()},
                                     "max_rel_err": err}
        print(f"[{args.variant} tiled={bool(args.tiled)}] {n}x{k}: " + " | ".join(
            f"{nm} {v:.1f} us ({us['tinygemm'] / v:.3f}x tinygemm)" for nm, v in us.items()), flush=True)
    tc._int4_pairs = orig
    path = os.path.join(os.environ.get("OUT", "/tmp"), f"int4_no_ptx_{args.variant}_{args.tiled}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
