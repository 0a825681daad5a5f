#!/usr/bin/env python3
"""Exploration behind issue #31's last target: can the workbook's int4 answer (solutions/07, a CUDA-core rows kernel
with the magic-number conversion, no inline PTX) reach 0.9x tinygemm on the lesson's three shapes by its launch
parameters alone? Every (BLOCK_N, BLOCK_W, num_warps) below runs beside tinygemm and the shipped defaults in one
interleaved run per shape (measure.peers, L2 flushed by a read).

  python3 lab/explore_quant_workbook_int4.py      (writes $OUT/explore_quant_workbook_int4.json;
  committed as lab/results/h100-explore-quant-workbook-int4.json)
"""
import functools
import json
import os

import gpucourse  # noqa: F401  (first: it chooses the mode)
import torch
from gpucourse.lessons.l07_quantization import bench, measure

CONFIGS = [(bn, bw, nw) for bn in (2, 4, 8, 16) for bw in (64, 128, 256) for nw in (1, 2, 4)
           if not (bn == 4 and bw == 128 and nw == 1)]


def main():
    out_path = os.path.join(os.environ.get("OUT", "/tmp"), "explore_quant_workbook_int4.json")
    sol = bench.solutions()["int4_gemv"]
    d = measure.quantized_weights(256, 1024)
    x = torch.randn(1, 1024, device=d["w"].device).to(d["w"].dtype)
    extra, failed = {}, {}
    for bn, bw, nw in CONFIGS:  # a configuration that does not compile or run is left out, and said
        fn = functools.partial(sol, BLOCK_N=bn, BLOCK_W=bw, num_warps=nw)
        try:
            fn(x, d["packed"], d["s4"], measure.GROUP)
            extra[f"int4 wb BN{bn} BW{bw} w{nw}"] = fn
        except Exception as exc:  # noqa: BLE001
            failed[f"BN{bn} BW{bw} w{nw}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    print(f"{len(extra)} configurations run; failed: {failed}")
    res = measure.peers(compile=False, int4_fn=sol, extra=extra, rounds=3)
    summary = {}
    for row in res["rows"]:
        us = row["us"]
        tg = us[measure.TINYGEMM]
        ranked = sorted(((tg / t, name) for name, t in us.items() if name.startswith("int4 wb")
                         or name == measure.INT4_SOLUTION), reverse=True)
        summary["x".join(map(str, row["shape"]))] = {"tinygemm_us": tg, "default": tg / us[measure.INT4_SOLUTION],
                                                      "best": ranked[:6]}
        print(row["shape"], f"tinygemm {tg:.1f} us; default {tg / us[measure.INT4_SOLUTION]:.3f}x;",
              "best:", [(round(r, 3), n) for r, n in ranked[:4]])
    with open(out_path, "w") as f:
        json.dump({"summary": summary, "failed": failed, "peers": res}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
