#!/usr/bin/env python3
"""Exploration for lesson 06 on a GPU: tune and measure what the lesson and its benchmarks will show, in one run.

Sections (each saved as soon as it is done, so a run cut short keeps the rest): the FP8 kernel of
``solutions/06_tensor_cores.ipynb`` against ``torch._scaled_mm`` on several shapes (and the autotuner's pick), its
accuracy as K grows, the course's bf16 Triton matmul (lesson 05) at 8192³, the dtype ladder and each dtype's error,
alignment, the fixed-tile N sweep with the wave model, and the mixed-precision training comparison.

Usage: python lab/explore_tensor_cores.py [--out FILE.json] [--only SECTION ...]
Writes lab/results/h100-explore-tensor-cores.json (or --out) and, when $OUT is set, a copy there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

import gpucourse  # before triton


# The exploration's first FP8 table (mixed modes side by side: its kernel precise against _scaled_mm precise,
# row-wise and fast); the lesson's like-for-like comparison is measure.fp8_like_for_like.
class FP8Table(dict):
    """``fp8_versus_scaled_mm``'s result: a dict that prints as a table."""

    def __str__(self) -> str:
        cols = ["yours", "yours, b row-major", "_scaled_mm", "_scaled_mm row-wise", "_scaled_mm fast accum"]
        lines = [f"{'shape':<18}" + "".join(f"{c:>23}" for c in cols) + f"{'yours / _scaled_mm':>20}"]
        for shape, r in self.items():
            cells = "".join(f"{r['tflops'].get(c, float('nan')):>23,.0f}" for c in cols)
            lines.append(f"{'x'.join(map(str, shape)):<18}{cells}{r['ratio']:>20.2f}")
        return "TFLOP/s (median of interleaved rounds)\n" + "\n".join(lines)


def fp8_versus_scaled_mm(fp8_matmul, sizes=((4096, 4096, 4096), (8192, 8192, 8192)), rounds: int = 3,
                         rep_ms: float = 200) -> FP8Table:
    """Your ``fp8_matmul(a, b, scale_a, scale_b)`` against ``torch._scaled_mm`` (per-tensor, row-wise, fast
    accumulation) on the same FP8 operands, b column-major (K contiguous, as cuBLAS wants) and, for yours, also
    row-major. Checked against ``_scaled_mm`` first (bf16 tolerance). Needs FP8 tensor cores."""
    import torch

    from gpucourse import device
    from gpucourse.lessons.l06_tensor_cores import precision
    from gpucourse.progress import progress
    from gpucourse.timing import interleaved, settle

    device.require_gpu("Timing FP8 matmuls")
    if not device.has_fp8():
        raise RuntimeError("this GPU has no FP8 tensor cores (compute capability 8.9+ needed)")
    bf = torch.bfloat16
    out = FP8Table()
    for m, n, k in progress(sizes, "fp8 against _scaled_mm"):
        x = torch.randn(m, k, device="cuda")
        y = torch.randn(n, k, device="cuda")  # y is b transposed: b = y.t() is K-contiguous
        qa, sa = precision.fp8_quantize(x)
        qy, sb = precision.fp8_quantize(y)
        qb = qy.t()
        qb_rows = qb.contiguous()
        ra, rsa = precision.fp8_quantize(x, rowwise=True)
        ry, rsb = precision.fp8_quantize(y, rowwise=True)
        want = torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf)
        torch.testing.assert_close(fp8_matmul(qa, qb, sa, sb), want, rtol=8e-3, atol=4e-3 * want.abs().max().item())
        torch.testing.assert_close(fp8_matmul(qa, qb_rows, sa, sb), want, rtol=8e-3,
                                   atol=4e-3 * want.abs().max().item())
        fns = {"yours": lambda: fp8_matmul(qa, qb, sa, sb),
               "yours, b row-major": lambda: fp8_matmul(qa, qb_rows, sa, sb),
               "_scaled_mm": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf),
               "_scaled_mm row-wise": lambda: torch._scaled_mm(ra, ry.t(), scale_a=rsa, scale_b=rsb.reshape(1, -1),
                                                               out_dtype=bf),
               "_scaled_mm fast accum": lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=bf,
                                                                 use_fast_accum=True)}
        for fn in fns.values():
            fn()  # compile and autotune before timing
        settle(fns["_scaled_mm"], seconds=1.0)
        runs = interleaved(fns, rounds=rounds, flops=2 * m * n * k, dtype="fp8", rep_ms=rep_ms)
        tfl = {name: r.typical.tflops for name, r in runs.items()}
        out[(m, n, k)] = {"tflops": tfl, "ms": {name: r.median_ms for name, r in runs.items()},
                          "ratio": runs["_scaled_mm"].median_ms / runs["yours"].median_ms,
                          "ratio_fast_accum": runs["_scaled_mm fast accum"].median_ms / runs["yours"].median_ms}
    return out


SECTIONS = ("fp8", "fp8_accuracy", "bf16_triton", "ladder", "errors", "alignment", "waves", "training")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "lab" / "results" / "h100-explore-tensor-cores.json"))
    ap.add_argument("--only", nargs="*", default=list(SECTIONS))
    args = ap.parse_args()
    gpucourse.setup()
    import torch

    from gpucourse import env
    from gpucourse.lessons.l06_tensor_cores import measure, precision, training
    from gpucourse.solutions import cached_solutions

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {"script": "lab/explore_tensor_cores.py", "commit": commit or None,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "environment": env.versions(), "results": {}}

    def save():
        text = json.dumps(doc, indent=1, default=str)
        Path(args.out).write_text(text)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], Path(args.out).name).write_text(text)

    def section(name, fn):
        if name not in args.only:
            return
        t0 = time.perf_counter()
        print(f"=== {name}", flush=True)
        try:
            doc["results"][name] = fn()
        except Exception:
            doc["results"][name] = {"error": traceback.format_exc()}
            print(doc["results"][name]["error"], flush=True)
        doc["results"].setdefault(name, {})
        if isinstance(doc["results"][name], dict):
            doc["results"][name]["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(doc["results"][name], default=str)[:3000], flush=True)
        save()

    sol = cached_solutions("06_tensor_cores")
    fp8_matmul = sol["fp8_matmul"]

    def fp8():
        sizes = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 2048), (16384, 4096, 4096), (2048, 2048, 8192)]
        table = fp8_versus_scaled_mm(fp8_matmul, sizes=sizes, rounds=3, rep_ms=200)
        kernel = sol["fp8_matmul_kernel"]
        picks = {str(k): str(v) for k, v in getattr(kernel, "cache", {}).items()}
        fast = fp8_versus_scaled_mm(lambda a, b, sa, sb: fp8_matmul(a, b, sa, sb, precise=False),
                                            sizes=[(8192, 8192, 8192)], rounds=3, rep_ms=200)
        return {"table": {"x".join(map(str, s)): r for s, r in table.items()}, "printed": str(table),
                "fast_accumulation_8192": {"x".join(map(str, s)): r for s, r in fast.items()},
                "printed_fast": str(fast), "autotune_picks": picks}

    def fp8_accuracy():  # the lesson's own measurement: both kernels, precise and fast accumulation
        return measure.fp8_accuracy_modes(fp8_matmul)

    def bf16_triton():
        from gpucourse.timing import interleaved, settle

        mm = cached_solutions("05_triton")["matmul"]
        n = 8192
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(n, n, device="cuda")
        y = torch.randn(n, n, device="cuda")
        qa, sa = precision.fp8_quantize(x)
        qy, sb = precision.fp8_quantize(y)
        qb = qy.t()
        mm(a, b), fp8_matmul(qa, qb, sa, sb)
        settle(lambda: torch.matmul(a, b), seconds=1.0)
        r = interleaved({"l05 bf16 triton": lambda: mm(a, b), "cuBLAS bf16": lambda: torch.matmul(a, b),
                         "fp8_matmul": lambda: fp8_matmul(qa, qb, sa, sb)}, rounds=3, flops=2 * n**3, rep_ms=200)
        return {name: {"ms": v.median_ms, "tflops": v.typical.tflops} for name, v in r.items()} | {
            "fp8_over_l05_bf16": r["l05 bf16 triton"].median_ms / r["fp8_matmul"].median_ms}

    def ladder():
        return measure.dtype_ladder(8192, rounds=3, rep_ms=200)

    def errors():
        return {"m": 1024, "n": 1024, "k": 8192, "rows": precision.error_table(1024, 1024, 8192, device="cuda")}

    def alignment():
        k_sweep = measure.alignment(8192, 8192)
        n_sweep = {}
        for n in (2040, 2044, 2048, 2049, 2056, 2064, 2072, 2080):
            a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(8192, n, device="cuda", dtype=torch.bfloat16)
            from gpucourse.timing import bench

            n_sweep[n] = bench(torch.matmul, a, b, flops=2 * 8192 * 8192 * n, dtype=torch.bfloat16).tflops
        return {"k_sweep": k_sweep, "n_sweep_cublas_tflops": n_sweep}

    def waves():
        sweep = measure.wave_sweep(8192, 8192, range(1024, 4097, 64))
        model = measure.compare_with_model(sweep)
        unaligned = {}
        from gpucourse.lessons.l06_tensor_cores import kernels
        from gpucourse.timing import bench

        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        for n in (2048, 2049):
            b = torch.randn(8192, n, device="cuda", dtype=torch.bfloat16)
            unaligned[n] = {"triton": bench(kernels.fixed_tile_matmul, a, b, flops=2 * 8192**2 * n,
                                            dtype=torch.bfloat16).tflops,
                            "cublas": bench(torch.matmul, a, b, flops=2 * 8192**2 * n, dtype=torch.bfloat16).tflops}
        return {"sweep": sweep, "model": {k: v for k, v in model.items() if k != "predicted_ms"},
                "unaligned_tflops": unaligned}

    def train():
        r = training.compare(steps=training.STEPS_GPU)
        r["summary"] = training.summary(r)
        for run in r["runs"].values():
            run["losses"] = [round(v, 4) for v in run["losses"]]
        return r

    for name, fn in [("fp8", fp8), ("fp8_accuracy", fp8_accuracy), ("bf16_triton", bf16_triton),
                     ("ladder", ladder), ("errors", errors), ("alignment", alignment), ("waves", waves),
                     ("training", train)]:
        section(name, fn)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
