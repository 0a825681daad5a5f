#!/usr/bin/env python3
"""Exploration behind issue #15, third round: does the way L2 is flushed before each repeat change the GEMV
ratios? triton.testing.do_bench flushes by *writing* zeros over a 256 MB buffer, which leaves L2 (50 MB on an
H100) full of dirty lines; the timed kernel then pays to write them back while it streams its weights. A decode
step in a real model finds L2 holding mostly clean lines (the previous layer's weights). Compare, per shape and
kernel: do_bench (write flush), events with a read flush (sum of the 256 MB buffer), events after a write flush,
events with no flush (weights may partly hit L2), and rotating through copies of the weights larger than L2 with
no flush at all.

  python3 lab/explore_quant_flush.py      (writes $OUT/explore_quant_flush.json)
"""
import json
import os
import statistics

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import explore_quant_dequant as e
from gpucourse.timing import event_times


def main():
    out_path = os.path.join(os.environ.get("OUT", "/tmp"), "explore_quant_flush.json")
    buf = torch.empty(256 * 2 ** 20, dtype=torch.int8, device="cuda")
    flushes = {"write": buf.zero_, "read": lambda: buf.sum(dtype=torch.int32), None: None}
    rows = []
    for n, k in ((8192, 8192), (14336, 4096), (4096, 14336)):
        torch.manual_seed(0)
        copies = []
        for _ in range(4):  # 4 copies: bf16 weights alone are 4 x 67-134 MB, well past L2
            w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
            q8, s8, _ = e.quant(w, 8)
            q4, s4, _ = e.quant(w, 4, 128)
            copies.append((w, q8, s8, e.pack(q4), s4))
        x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
        kernels = {
            "bf16": lambda c: F.linear(x, c[0]),
            "int8": lambda c: e.run_i8(x, c[1], c[2], 8, 1024, 4, True, 3),
            "int4": lambda c: e.run_i4(x, c[3], c[4], 128, 16, 512, 4, 2, 3),
        }
        res = {}
        for name, kern in kernels.items():
            c0 = copies[0]
            r = {"do_bench": statistics.median(do_bench(lambda: kern(c0), warmup=10, rep=100, return_mode="all"))}
            for fname, fl in flushes.items():
                t = event_times(lambda: kern(c0), reps=200, warmup=20, before=fl, wait_each=False)
                r[f"events flush={fname}"] = statistics.median(t)
            it = [0]

            def rot():
                it[0] = (it[0] + 1) % len(copies)
                return kern(copies[it[0]])
            r["rotate 4 copies"] = statistics.median(event_times(rot, reps=200, warmup=20, wait_each=False))
            res[name] = {key: v * 1e3 for key, v in r.items()}
        for method in res["bf16"]:
            row = {"shape": [n, k], "method": method, **{name: round(res[name][method], 2) for name in res},
                   "int8 x": round(res["bf16"][method] / res["int8"][method], 3),
                   "int4 x": round(res["bf16"][method] / res["int4"][method], 3)}
            print(json.dumps(row), flush=True)
            rows.append(row)
        copies = None  # frees the weights (a del would leave rot() naming a deleted variable)
    with open(out_path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
