#!/usr/bin/env python3
"""Lesson 09 on a GPU, quickly, before the notebooks run: the fused RMSNorm+residual kernel's correctness and its
ratios to torch.compile(max-autotune) and copy bandwidth at the two target shapes, the compile modes, proton's tree
and Nsight Compute (are counters readable? the compiled sin chain's DRAM bytes, the softmax's throughput and
occupancy). Prints JSON. Usage: python lab/explore_compile09.py [--out FILE] [--skip STEP ...]"""
import argparse
import json
import sys
import tempfile
import time
import traceback

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch

from gpucourse.lessons.l09_compile_profiling import kernels, measure


def correctness() -> dict:
    errs = {}
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        for n in (1, 77, 1024, 5000, 16384):
            x, r = (torch.randn(33, n, device="cuda", dtype=dt) for _ in range(2))
            w = torch.randn(n, device="cuda", dtype=dt)
            o, s = kernels.fused_rmsnorm_residual(x, r, w, 1e-6)
            ro, rs = kernels.rmsnorm_residual_torch(x.double(), r.double(), w.double(), 1e-6)
            errs[f"{dt} {n}"] = [float((o.double() - ro).abs().max() / ro.abs().max()),
                                 float((s.double() - rs).abs().max() / rs.abs().max())]
    return errs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--skip", nargs="*", default=[])
    a = ap.parse_args()
    doc = {"versions": {"torch": torch.__version__, "triton": __import__("triton").__version__,
                        "gpu": torch.cuda.get_device_name()}}
    tmp = tempfile.mkdtemp()
    steps = [("correctness", correctness),
             ("rmsnorm", lambda: {f"{r}x{c}": measure.rmsnorm_point(r, c, rounds=2) for r, c in measure.RMS_SHAPES}),
             ("ncu_sin_compiled", lambda: measure.ncu("sin_chain_compiled")),
             ("ncu_softmax", lambda: measure.ncu("softmax")),
             ("proton", lambda: measure.proton_tree(tmp + "/p09")),
             ("fusion", lambda: measure.fusion_examples(rounds=2)),
             ("modes", lambda: measure.compile_modes(rounds=2))]
    for name, fn in steps:
        if name in a.skip:
            continue
        t = time.time()
        try:
            doc[name] = fn()
        except Exception:  # noqa: BLE001
            doc[name] = {"error": traceback.format_exc()[-2500:]}
        doc[name + "_s"] = time.time() - t
        print(name, f"{doc[name + '_s']:.1f} s", json.dumps(doc[name], indent=1, default=str)[:3000], flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(doc, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
