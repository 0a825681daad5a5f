"""Where a grader's CUDA build spends its time, and what the host optimisation level costs (issue 17's throughput).

A CUDA submission's build compiles two translation units: ``main.cpp`` (pybind glue, with the precompiled
torch/extension.h) and the ``.cu`` file (nvcc: cudafe++ splits host from device code, the device pass compiles the
kernels alone, gcc compiles the host side with torch's headers and the binding). nvcc's ``-O`` is the *host* level
(the kernels' optimisation is ptxas's, -O3 by default, unchanged here). This script builds the same block_sum
submission under several host levels, each variant in its own process with its own cache (its own precompiled
header), all at once, and records: the precompiled header's seconds, the build's wall seconds, ninja's seconds per
translation unit, nvcc's own phase times (``nvcc --time``), and the cost in the call itself: microseconds per call of
the bound function on a 1-element tensor (host overhead: argument conversion, the binding's torch calls, the launch).

    python3 lab/explore_cuda_build_flags.py --out $OUT/h100-explore-cuda-build-flags.json
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {  # name: (nvcc host flags replacing -O3, main.cpp flags replacing -O2)
    "O3/O2 (today)": ("-O3", "-O2"),
    "O1/O1": ("-O1", "-O1"),
    "O0/O0": ("-O0", "-O0"),
}


def one(name: str, nvcc_opt: str, main_opt: str) -> dict:
    """Run in a child: build the template under these flags with a fresh cache; return the figures."""
    import torch
    from gpucourse import cuda_build

    cuda_build.NVCC_FLAGS = tuple(nvcc_opt if f == "-O3" else f for f in cuda_build.NVCC_FLAGS)
    cuda_build.MAIN_CFLAGS = (main_opt,)
    out = {"variant": name, "nvcc_flags": list(cuda_build.NVCC_FLAGS), "main_cflags": list(cuda_build.MAIN_CFLAGS)}
    t0 = time.perf_counter()
    folder = cuda_build.prepare_shared()
    out["pch_s"] = round(time.perf_counter() - t0, 2)
    out["pch"] = bool(folder)
    if folder:
        os.environ[cuda_build.SHARED_ENV] = folder
    src = {}
    exec(open(os.path.join(ROOT, "tests/submissions/block_sum/right_atomic_per_block.py")).read(), src)
    timefile = os.path.join(cuda_build.cache_dir(), "nvcc_time.csv")
    t0 = time.perf_counter()
    mod = cuda_build.build("flags_" + name.split()[0].replace("/", "_"), src["KERNELS"], src["BINDING"], src["CPP"],
                           ["sum_cuda"], flags=("--time", timefile))
    out["build_s"] = round(time.perf_counter() - t0, 2)
    out["layout"] = getattr(mod, "build_layout", "?")
    logs = [os.path.join(r, f) for r, _, fs in os.walk(cuda_build.cache_dir()) for f in fs if f == ".ninja_log"]
    targets = {}
    for log in logs:
        for line in open(log):
            if line.startswith("#"):
                continue
            start, end, _, target, *_ = line.rstrip("\n").split("\t")
            targets[target] = round((int(end) - int(start)) / 1000, 2)
    out["ninja_s"] = targets
    phases = {}
    if os.path.exists(timefile):
        for row in csv.reader(open(timefile)):
            if len(row) >= 4 and row[0].strip() not in ("source file name", ""):
                try:
                    phases[row[1].strip()] = round(phases.get(row[1].strip(), 0) + float(row[-1]) / 1000, 2)
                except ValueError:
                    pass
    out["nvcc_phases_s"] = phases
    x = torch.rand(1, device="cuda")
    val = mod.sum_cuda(torch.ones(1000, device="cuda"))
    out["sum_of_1000_ones"] = float(val)
    for _ in range(2000):
        mod.sum_cuda(x)
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20000):
            mod.sum_cuda(x)
        torch.cuda.synchronize()
        best.append((time.perf_counter() - t0) / 20000 * 1e6)
    out["us_per_call"] = round(min(best), 3)
    out["us_per_call_runs"] = [round(b, 3) for b in best]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        nvcc_opt, main_opt = VARIANTS[args.child]
        print(json.dumps(one(args.child, nvcc_opt, main_opt)))
        return
    procs = {}
    for name in VARIANTS:
        env = dict(os.environ, GPUCOURSE_CACHE=tempfile.mkdtemp(prefix="flags-"))
        procs[name] = subprocess.Popen([sys.executable, __file__, "--out", args.out, "--child", name], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = []
    for name, p in procs.items():
        so, se = p.communicate(timeout=500)
        try:
            results.append(json.loads(so.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            results.append({"variant": name, "error": (se or so)[-3000:]})
    import torch
    rec = {"what": __doc__.split("\n\n")[0], "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cpus": os.cpu_count(), "variants_ran_at_once": True, "results": results,
           "date": time.strftime("%Y-%m-%d")}
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
