#!/usr/bin/env python3
"""Lesson 09 on a GPU, quickly: the fused RMSNorm+residual kernel against torch.compile (default and max-autotune)
and copy bandwidth at the two target shapes, compile times, and which profilers this machine allows (ncu counters,
proton, nsys). Prints JSON. Usage: python benchmarks/explore_compile09.py [--out FILE] [--no-ncu]"""
import argparse
import json
import shutil
import subprocess
import sys
import time

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch

from gpucourse import timing
from gpucourse.lessons.l09_compile_profiling import kernels


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--no-ncu", action="store_true")
    a = ap.parse_args()
    doc = {"versions": {"torch": torch.__version__, "triton": __import__("triton").__version__,
                        "gpu": torch.cuda.get_device_name()}}
    errs = {}
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        for n in (1, 77, 1024, 5000, 16384):
            x, r = (torch.randn(33, n, device="cuda", dtype=dt) for _ in range(2))
            w = torch.randn(n, device="cuda", dtype=dt)
            o, s = kernels.fused_rmsnorm_residual(x, r, w, 1e-6)
            ro, rs = kernels.rmsnorm_residual_torch(x.double(), r.double(), w.double(), 1e-6)
            errs[f"{dt} {n}"] = [float((o.double() - ro).abs().max() / ro.abs().max()),
                                 float((s.double() - rs).abs().max() / rs.abs().max())]
    doc["rel_err"] = errs
    print(json.dumps(doc, indent=1), flush=True)
    for shape in ((8192, 8192), (65536, 1024)):
        x, r = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w = torch.randn(shape[1], device="cuda", dtype=torch.bfloat16)
        point = {}
        t = time.time()
        default = torch.compile(kernels.rmsnorm_residual_torch)
        default(x, r, w, 1e-6)
        torch.cuda.synchronize()
        point["compile_default_s"] = time.time() - t
        t = time.time()
        tuned = torch.compile(kernels.rmsnorm_residual_torch, mode="max-autotune")
        tuned(x, r, w, 1e-6)
        torch.cuda.synchronize()
        point["compile_max_autotune_s"] = time.time() - t
        nbytes = kernels.moved_bytes(x, r, w)
        fns = {"ours": lambda: kernels.fused_rmsnorm_residual(x, r, w, 1e-6),
               "compile": lambda: default(x, r, w, 1e-6), "max-autotune": lambda: tuned(x, r, w, 1e-6),
               "eager": lambda: kernels.rmsnorm_residual_torch(x, r, w, 1e-6)}
        res = timing.interleaved(fns, rounds=3, bytes=nbytes, flush_l2="read")
        point["ms"] = {k: v.median_ms for k, v in res.items()}
        point["gbps"] = {k: v.typical.gbps for k, v in res.items()}
        point["copy_gbps"] = timing.copy_gbps(nbytes // 2, flush_l2="read")
        point["ours/max-autotune"] = point["ms"]["max-autotune"] / point["ms"]["ours"]
        point["ours/copy"] = point["gbps"]["ours"] / point["copy_gbps"]
        doc[f"{shape[0]}x{shape[1]}"] = point
        print(json.dumps(point, indent=1), flush=True)
    try:
        import triton.profiler as proton  # noqa: F401
        doc["proton"] = "imports"
    except Exception as exc:  # noqa: BLE001
        doc["proton"] = repr(exc)
    doc["nsys"] = shutil.which("nsys")
    doc["ncu"] = shutil.which("ncu")
    if doc["ncu"] and not a.no_ncu:
        t = time.time()
        p = subprocess.run([doc["ncu"], "--metrics", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "-c", "1",
                            sys.executable, "-c",
                            "import torch; x = torch.randn(2**24, device='cuda'); torch.cuda.synchronize(); y = x * 2; "
                            "torch.cuda.synchronize()"], capture_output=True, text=True, timeout=120)
        doc["ncu_run"] = {"rc": p.returncode, "s": time.time() - t, "tail": (p.stdout + p.stderr)[-1500:]}
    print(json.dumps({k: doc[k] for k in ("proton", "nsys", "ncu", "ncu_run") if k in doc}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
