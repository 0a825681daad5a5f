#!/usr/bin/env python3
"""Exploration behind issue #15, tenth round: is the M = 1 GEMVs' ~27 µs floor the arithmetic or the way they read?

Round nine (explore_quant_inplace.py) halved the instructions per weight and removed every shared-memory shuffle
from the int4 loop, and the kernel got no faster: int4 (33.5 MB) and int8 (67 MB) kernels all land at 26-31 µs on
8192 x 8192 while a copy of the int4 bytes takes 13 µs. This round separates reading from computing. It times, on
the same 32 MB of int32 words (the int4 weights of 8192 x 8192), with L2 flushed by a read:

* ``stream``: each program sums one contiguous chunk (the copy's access pattern, no GEMV);
* ``rows``: the GEMV's pattern with no dequantization: each program sums BLOCK_N rows, BLOCK_W words of each per
  step, all programs walking the columns in step (``rot``: each program starts at another column block);
* the lesson's int4/int8 rows kernels, plain and rotated, and bf16 ``F.linear`` / a torch copy for reference.

``--ncu NAME`` runs only that contender a few times (for ``ncu --launch-skip 2 --launch-count 1``).

    python3 lab/explore_quant_access.py --out $OUT/h100-explore-quant-access.json
A record of its run: the lesson kernels' ROTATE option it times was removed after it (no gain), so rerun it at
ba4235c.
"""
import argparse
import json
import platform
import time

import gpucourse  # noqa: F401  (before triton: selects the mode)
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from gpucourse import device
from gpucourse.lessons.l07_quantization import measure
from gpucourse.quant import kernels
from gpucourse.timing import interleaved


@triton.jit
def stream_kernel(w_ptr, out_ptr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * CHUNK
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for i in range(0, CHUNK, BLOCK):
        acc += tl.load(w_ptr + base + i + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))


@triton.jit
def rows_kernel(w_ptr, out_ptr, KW, stride, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, ROTATE: tl.constexpr,
                SCALAR: tl.constexpr):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rw = tl.arange(0, BLOCK_W)
    if SCALAR:
        rw = tl.max_contiguous(rw, 1)
    rows = w_ptr + rn.to(tl.int64)[:, None] * stride
    acc = tl.zeros((BLOCK_N, BLOCK_W), dtype=tl.int32)
    n_steps = KW // BLOCK_W
    first = tl.program_id(0) % n_steps if ROTATE else 0
    for i in range(0, n_steps):
        acc += tl.load(rows + (((i + first) % n_steps) * BLOCK_W + rw)[None, :])
    tl.store(out_ptr + rn, tl.sum(acc, axis=1))


def contenders(n=8192, k=8192):
    dev = device.torch_device()
    kw = k // 8
    words = torch.randint(-2 ** 31, 2 ** 31 - 1, (n, kw), dtype=torch.int32, device=dev)
    part = torch.empty(n, dtype=torch.int32, device=dev)
    d = measure.quantized_weights(n, k, 128, torch.Generator().manual_seed(0))
    x = torch.randn(1, k).to(torch.bfloat16).to(dev)
    dst = torch.empty_like(words)
    fns = {"bf16 F.linear": lambda: F.linear(x, d["w"]),
           "torch copy of the int4 bytes": lambda: dst.copy_(words)}
    for chunk, block, warps in ((16384, 2048, 8), (65536, 4096, 8), (8192, 1024, 4)):
        grid = (words.numel() // chunk,)
        fns[f"stream chunk{chunk} b{block} w{warps}"] = (
            lambda grid=grid, chunk=chunk, block=block, warps=warps:
            stream_kernel[grid](words, part, CHUNK=chunk, BLOCK=block, num_warps=warps))
    for bn, bw, warps, rot, scalar in ((4, 256, 2, False, True), (4, 256, 2, True, True), (4, 256, 2, False, False),
                                       (4, 256, 2, True, False), (8, 512, 4, False, False),
                                       (8, 512, 4, True, False), (4, 1024, 8, False, False), (2, 1024, 4, False, False),
                                       (1, 1024, 4, False, False)):
        name = f"rows BN{bn} BW{bw} w{warps}{' rot' if rot else ''}{' scalar' if scalar else ''}"
        fns[name] = (lambda bn=bn, bw=bw, warps=warps, rot=rot, scalar=scalar:
                     rows_kernel[(n // bn,)](words, part, kw, kw, BLOCK_N=bn, BLOCK_W=bw, ROTATE=rot,
                                             SCALAR=scalar, num_warps=warps))
    for bn, bw, warps, rot in ((4, 256, 2, False), (4, 256, 2, True), (4, 512, 4, True), (8, 512, 4, True),
                               (2, 256, 2, True), (2, 128, 1, True)):
        cfg = dict(rows=True, BLOCK_N=bn, BLOCK_W=bw, num_warps=warps, ROTATE=rot)
        fns[f"int4 BN{bn} BW{bw} w{warps}{' rot' if rot else ''}"] = (
            lambda cfg=cfg: kernels.w4a16_gemv(x, d["packed"], d["s4"], 128, **cfg))
    for bn, bw, warps, rot in ((4, 256, 2, False), (4, 256, 2, True), (4, 512, 4, True), (2, 256, 2, True)):
        cfg = dict(rows=True, BLOCK_N=bn, BLOCK_W=bw, num_warps=warps, ROTATE=rot)
        fns[f"int8 BN{bn} BW{bw} w{warps}{' rot' if rot else ''}"] = (
            lambda cfg=cfg: kernels.w8a16_gemv(x, d["q8"], d["s8"], **cfg))
    return fns, words.numel() * 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="h100-explore-quant-access.json")
    ap.add_argument("--ncu", nargs="*", default=None, help="run only these contenders, 3 times each")
    args = ap.parse_args()
    fns, nbytes = contenders()
    if args.ncu is not None:
        for name in args.ncu:
            for _ in range(3):
                fns[name]()
        torch.cuda.synchronize()
        return
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "int4_bytes": nbytes}
    for fn in fns.values():
        fn()
    timed = interleaved(fns, rounds=3, flush_l2="read")
    res["us"] = {name: r.median_ms * 1e3 for name, r in timed.items()}
    res["read_tb_s"] = {name: nbytes / (us * 1e-6) / 1e12 for name, us in res["us"].items()
                        if name.startswith(("stream", "rows", "int4"))}
    for name, us in res["us"].items():
        print(f"{name:40s} {us:7.1f} us  {res['read_tb_s'].get(name, 0):5.2f} TB/s (int4 bytes)", flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
