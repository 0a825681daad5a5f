"""Lesson 06's registered benchmarks. Each is measured by the lesson's own cells too (which hand their result to
``gpucourse.benchmarks.record``); ``gpucourse bench`` runs the same functions on its own. Every ratio is measured
within one run: the kernel, its peer and the ceiling timed the same way, interleaved.
"""
from __future__ import annotations

from gpucourse.benchmarks import register, target

from . import measure, training

FP8_SHAPES = ((8192, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 2048), (16384, 4096, 4096))


def solutions() -> dict:
    from gpucourse.solutions import cached_solutions
    from . import LESSON

    return cached_solutions(LESSON.notebook)


def fp8_result(shapes=FP8_SHAPES, rounds: int = 3) -> dict:
    """The workbook's ``fp8_matmul`` against ``torch._scaled_mm`` on ``shapes`` and, at 8192³, against lesson 05's
    bf16 Triton matmul (the workbook kernel) and the FP8 datasheet peak."""
    import torch

    from gpucourse.solutions import cached_solutions
    from gpucourse.timing import interleaved, settle

    from . import precision

    fp8_matmul = solutions()["fp8_matmul"]
    table = measure.fp8_versus_scaled_mm(fp8_matmul, sizes=shapes, rounds=rounds)
    n = 8192
    mm = cached_solutions("05_triton")["matmul"]  # lesson 05's workbook kernel, loaded from its solved workbook
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    qa, sa = precision.fp8_quantize(torch.randn(n, n, device="cuda"))
    qy, sb = precision.fp8_quantize(torch.randn(n, n, device="cuda"))
    mm(a, b), fp8_matmul(qa, qy.t(), sa, sb)
    settle(lambda: torch.matmul(a, b), seconds=1.0)
    r = interleaved({"fp8_matmul": lambda: fp8_matmul(qa, qy.t(), sa, sb), "lesson 05 bf16 matmul": lambda: mm(a, b)},
                    rounds=rounds, flops=2 * n**3, rep_ms=200)
    return {"shapes": {"x".join(map(str, s)): v for s, v in table.items()},
            "vs_lesson05_bf16": {"fp8_matmul_tflops": r["fp8_matmul"].typical.tflops,
                                 "bf16_tflops": r["lesson 05 bf16 matmul"].typical.tflops,
                                 "ratio": r["lesson 05 bf16 matmul"].median_ms / r["fp8_matmul"].median_ms},
            "fp8_peak_tflops": measure.peak("fp8")}


def fp8_targets(res: dict) -> list:
    big = res["shapes"]["8192x8192x8192"]
    out = [target("fp8_matmul 8192^3 / torch._scaled_mm per-tensor", big["ratio"], 0.90),
           target("fp8_matmul 8192^3 / torch._scaled_mm per-tensor, fast accumulation (like for like)",
                  big["ratio_fast_accum"], 0.90),
           target("fp8_matmul 8192^3 / lesson 05 bf16 Triton matmul", res["vs_lesson05_bf16"]["ratio"], 1.6)]
    res["fp8_matmul_8192_pct_of_fp8_peak"] = (100 * big["tflops"]["yours"] / res["fp8_peak_tflops"]
                                              if res.get("fp8_peak_tflops") else None)
    res["ratios_other_shapes"] = {s: v["ratio"] for s, v in res["shapes"].items() if s != "8192x8192x8192"}
    return out


@register("tensorcores06_fp8", targets=fp8_targets)
def fp8_bench() -> dict:
    return fp8_result()


def waves_result() -> dict:
    sweep = measure.wave_sweep()
    model = measure.compare_with_model(sweep)
    return {"sweep": sweep, "model": model}


def waves_targets(res: dict) -> list:
    m = res["model"]
    return [target("wave model: tile boundaries where predicted and measured jumps agree (fraction)",
                   m["agree"] / m["of"], 1.0),
            target("wave model: median |predicted - measured| / measured time", m["median_abs_error"], 0.10, "<=")]


@register("tensorcores06_waves", targets=waves_targets)
def waves_bench() -> dict:
    return waves_result()


def training_targets(res: dict) -> list:
    """The H100's targets for the training comparison, for the runs this GPU made: the mixed-precision run is bf16
    autocast where the GPU has bf16 tensor cores, else fp16 autocast with its GradScaler (a T4); the TF32 target only
    where TF32 ran (Ampere and newer)."""
    runs, finals = res["runs"], res["fp32_finals"]
    mixed = next((m for m in ("bf16 autocast", "fp16 autocast + GradScaler") if m in runs), None)
    if mixed is None or "fp32" not in runs:
        return []
    low = runs[mixed]
    spread = max(finals) - min(finals)
    mean = sum(finals) / len(finals)
    res["fp32_final_spread"] = spread
    out = [target(f"training step: {mixed} speed-up over fp32", runs["fp32"]["step_ms"] / low["step_ms"], 5.0)]
    if "tf32" in runs:
        out.append(target(f"training step: {mixed} speed-up over TF32", runs["tf32"]["step_ms"] / low["step_ms"], 2.3))
    out.append(target(f"|{mixed.split()[0]} final loss - fp32 mean| / fp32 run-to-run spread",
                      abs(low["final_loss"] - mean) / spread if spread else float("inf"), 1.0, "<="))
    return out


@register("tensorcores06_training", targets=training_targets)
def training_bench() -> dict:
    return training.compare(steps=training.STEPS_GPU)


@register("tensorcores06_ladder")
def ladder_bench() -> dict:
    return {"ladder": measure.dtype_ladder(), "alignment": measure.alignment()}
