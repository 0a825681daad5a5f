#!/usr/bin/env python3
"""Lesson 08 on a GPU, quickly: correctness of the kernels at ragged sizes, then the forward, memory and backward
benchmarks and the per-config table, printed as JSON (for tuning the kernel before the notebooks run).
Usage: python lab/explore_flash_attention.py [--quick] [--out FILE]"""
import argparse
import json
import sys
import time

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch

from gpucourse.lessons.l08_flash_attention import bench, kernels, measure


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--skip", nargs="*", default=[])
    a = ap.parse_args()
    doc = {"versions": {"torch": torch.__version__, "triton": __import__("triton").__version__,
                        "gpu": torch.cuda.get_device_name()}}
    t0 = time.time()
    errs = {}
    for dt in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for s in (1, 77, 1000):
                for causal in (False, True):
                    q, k, v = (torch.randn(2, 3, s, d, device="cuda", dtype=dt) for _ in range(3))
                    o = kernels.forward(q, k, v, causal)[0]
                    r = kernels.reference(q, k, v, causal)
                    errs[f"{dt} D{d} S{s} {causal}"] = float((o.double() - r).abs().max() / r.abs().max())
    doc["fwd_rel_err_max"] = max(errs.values())
    doc["bwd_rel_err"] = {f"D{d} S{s} {c}": measure.check_backward(s=s, d=d, causal=c)
                          for d in (64, 128) for s in (77, 256) for c in (False, True)}
    doc["correctness_s"] = time.time() - t0
    print(json.dumps(doc, indent=1), flush=True)
    steps = [("forward", lambda: bench.forward_result(rounds=1 if a.quick else 3)),
             ("memory", lambda: measure.memory()),
             ("backward", lambda: bench.backward_result(rounds=1 if a.quick else 3)),
             ("configs", lambda: {f"D{d}": measure.configs_at(d=d) for d in (64, 128)})]
    for name, fn in steps:
        if name in a.skip:
            continue
        t = time.time()
        try:
            doc[name] = fn()
        except Exception:
            import traceback
            doc[name] = {"error": traceback.format_exc()[-2000:]}
        doc[name + "_s"] = time.time() - t
        print(name, json.dumps(doc[name], indent=1, default=str), flush=True)
    for name, tf in (("forward", bench.forward_targets), ("backward", bench.backward_targets)):
        if isinstance(doc.get(name), dict) and "points" in doc[name]:
            for t in tf(doc[name]):
                print(f"[{'met' if t['met'] else 'MISSED'}] {t['name']}: {t['value']:.3f} (goal {t['op']} {t['goal']})")
    if isinstance(doc.get("memory"), dict) and "ours (Triton)" in doc["memory"]:
        for t in bench.memory_targets(doc["memory"]):
            print(f"[{'met' if t['met'] else 'MISSED'}] {t['name']}: {t['value']:.3f}")
    if a.out:
        json.dump(doc, open(a.out, "w"), indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
