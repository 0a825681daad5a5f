"""Lesson 06's registered benchmarks. Each is measured by the lesson's own cells too (which hand their result to
``gpucourse.benchmarks.record``); ``gpucourse bench`` runs the same functions on its own. Every ratio is measured
within one run: the kernel, its peer and the ceiling timed the same way, interleaved.
"""
from __future__ import annotations

from gpucourse.benchmarks import register, target
from gpucourse.solutions import cached_solutions, for_lesson

from . import LESSON, measure, training

# 8192³ (the headline), then flatter and smaller shapes where cuBLAS's kernel choice matters more.
FP8_SHAPES = ((8192, 8192, 8192), (8192, 8192, 2048), (16384, 8192, 1024), (4096, 4096, 4096), (1024, 8192, 8192))


solutions = for_lesson(LESSON)  # the solved workbook's namespace, loaded on the first call
# Lesson 05's solved workbook, whose bf16 matmul fp8_result times beside the FP8 kernel: a dependency on another
# lesson that no import shows, so it is declared (tests/test_specs.py holds every workbook a lesson loads to this).
USES_WORKBOOKS = ("05_triton",)


def fp8_result(shapes=FP8_SHAPES, rounds: int = 7, rep_ms: float = 100) -> dict:
    """The workbook's ``fp8_matmul`` against ``torch._scaled_mm`` like for like (precise against precise, fast
    against fast: :func:`measure.fp8_like_for_like`) on ``shapes``, and at 8192³ against lesson 05's bf16 Triton
    matmul (the workbook kernel), each FP8 mode timed in the same interleaved rounds."""
    import torch

    from gpucourse.timing import interleaved, settle

    from . import precision

    fp8_matmul = solutions()["fp8_matmul"]
    table = measure.fp8_like_for_like(fp8_matmul, shapes=shapes, rounds=rounds, rep_ms=rep_ms)
    n = 8192
    mm = cached_solutions("05_triton")["matmul"]  # lesson 05's workbook kernel, loaded from its solved workbook
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    qa, sa = precision.fp8_quantize(torch.randn(n, n, device="cuda"))
    qy, sb = precision.fp8_quantize(torch.randn(n, n, device="cuda"))
    fns = {"fp8_matmul fast": lambda: fp8_matmul(qa, qy.t(), sa, sb, precise=False),
           "fp8_matmul precise": lambda: fp8_matmul(qa, qy.t(), sa, sb, precise=True),
           "lesson 05 bf16 matmul": lambda: mm(a, b)}
    for fn in fns.values():
        fn()
    settle(lambda: torch.matmul(a, b), seconds=1.0)
    r = interleaved(fns, rounds=rounds, rep_ms=rep_ms)
    vs = {"tflops": {name: 2 * n**3 / v.median_ms / 1e9 for name, v in r.items()}}
    for mode in ("fast", "precise"):
        vs[mode], vs[f"{mode}_range"] = measure.round_ratios(r["lesson 05 bf16 matmul"].medians_ms,
                                                            r[f"fp8_matmul {mode}"].medians_ms)
    return {"shapes": table["shapes"], "rounds": rounds, "vs_lesson05_bf16": vs, "fp8_peak_tflops": measure.peak("fp8")}


def fp8_targets(res: dict) -> list:
    """Like for like at 8192³, and what FP8 buys over the course's bf16 kernel. Each threshold sits below what the
    reference solution measured on the course's H100 by more than the spread of the rounds (lab/README.md,
    explore_tensor_cores: fast/fast 0.89, precise/precise 0.79, fast/bf16 1.83; a two-round
    check of 2026-11-26 spread 0.88-0.91, 0.72-0.78 and 1.54-1.83): a kernel that misses one has lost real ground,
    not a draw of the clocks. FP8's datasheet rate is twice bf16's; 1.5 asks a Triton kernel to keep three quarters
    of that doubling."""
    big = res["shapes"]["8192x8192x8192"]
    out = [target("fp8_matmul fast / torch._scaled_mm fast (use_fast_accum=True), 8192^3", big["fast"], 0.85),
           target("fp8_matmul precise / torch._scaled_mm precise (default), 8192^3", big["precise"], 0.70),
           target("fp8_matmul fast / lesson 05 bf16 Triton matmul, 8192^3", res["vs_lesson05_bf16"]["fast"], 1.5)]
    res["fp8_matmul_8192_pct_of_fp8_peak"] = {
        mode: 100 * big["tflops"][f"fp8_matmul {mode}"] / res["fp8_peak_tflops"] for mode in ("fast", "precise")
    } if res.get("fp8_peak_tflops") else None
    res["ratios_other_shapes"] = {s: {"precise": v["precise"], "fast": v["fast"]} for s, v in res["shapes"].items()
                                  if s != "8192x8192x8192"}
    return out


@register("tensorcores06_fp8", targets=fp8_targets)
def fp8_bench() -> dict:
    return fp8_result()


# Issue #33 asked 1.0x at 8192³ and 0.95x elsewhere. A published ceiling for Triton on Hopper: tritonbench's tuned
# persistent FP8 GEMM at 0.987x cuBLAS (tensor-wise scales, 4096³; H100, Triton 3.6 with automatic warp
# specialization; meta-pytorch/tritonbench PR #1149), so 1.0x is printed as the issue set it and 0.95x is the bar.
HOPPER_FP8_GOAL, HOPPER_FP8_ISSUE_GOAL = 0.95, 1.0


def fp8_hopper_result(shapes=FP8_SHAPES, rounds: int = 5, rep_ms: float = 100) -> dict:
    """Lesson 06's Hopper kernel (:func:`hopper_fp8.fp8_matmul`: persistent, TMA loads) against ``torch._scaled_mm``
    like for like (:func:`measure.fp8_like_for_like`) on the shapes of :func:`fp8_result`; it needs compute
    capability 9.0 (RuntimeError with the reason elsewhere)."""
    from . import hopper_fp8

    why = hopper_fp8.unavailable()
    if why:
        raise RuntimeError(f"the Hopper FP8 kernel cannot run here: {why}")
    res = measure.fp8_like_for_like(hopper_fp8.fp8_matmul, shapes=shapes, rounds=rounds, rep_ms=rep_ms,
                                    row_major_b=False)
    res["configs"] = {str(k): str(v) for k, v in hopper_fp8.fp8_persistent_kernel.cache.items()}
    return res


def fp8_hopper_targets(res: dict) -> list:
    """Fast against fast on every shape: the issue's 1.0x at 8192³, and :data:`HOPPER_FP8_GOAL` on each shape."""
    fast = {s: r["fast"] for s, r in res["shapes"].items()}
    out = [target("Hopper fp8_matmul fast / _scaled_mm fast, 8192^3 (the issue's goal)", fast["8192x8192x8192"],
                  HOPPER_FP8_ISSUE_GOAL)]
    out += [target(f"Hopper fp8_matmul fast / _scaled_mm fast, {s}", v, HOPPER_FP8_GOAL) for s, v in fast.items()]
    return out


@register("tensorcores06_fp8_hopper", targets=fp8_hopper_targets)
def fp8_hopper_bench() -> dict:
    return fp8_hopper_result()


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


# A bf16 step should gain at least this share of what bf16 gains over TF32 in the model's matmuls alone (both
# measured in the same run). A step whose matmuls stayed in TF32 would score about 1 / (bf16/TF32 matmul ratio), near
# 0.5 on an H100; the parts autocast keeps in fp32 (layer norms, the loss, AdamW's update) may pull a healthy step
# somewhat below 1, and attention (a fused bf16 kernel against an fp32 one) may push it above.
TF32_SHARE = 0.75


def training_targets(res: dict) -> list:
    """The H100's targets for the training comparison, for the runs this GPU made: the mixed-precision run is bf16
    autocast where the GPU has bf16 tensor cores, else fp16 autocast with its GradScaler (a T4). The TF32 target
    (only where TF32 ran and the matmul rates were measured) is relative: the step's speed-up over TF32 divided by
    the bf16/TF32 speed-up of the model's matmuls in the same run, at least :data:`TF32_SHARE`."""
    runs, finals = res["runs"], res["fp32_finals"]
    mixed = next((m for m in ("bf16 autocast", "fp16 autocast + GradScaler") if m in runs), None)
    if mixed is None or "fp32" not in runs:
        return []
    low = runs[mixed]
    spread = max(finals) - min(finals)
    mean = sum(finals) / len(finals)
    res["fp32_final_spread"] = spread
    out = [target(f"training step: {mixed} speed-up over fp32", runs["fp32"]["step_ms"] / low["step_ms"], 5.0)]
    matmul = res.get("matmul")
    if "tf32" in runs and matmul and mixed.startswith("bf16"):
        step = runs["tf32"]["step_ms"] / low["step_ms"]
        res["speedup_over_tf32"] = step
        out.append(target("training step: bf16 speed-up over TF32 / bf16-over-TF32 speed-up of the model's "
                          "matmuls (same run)", step / matmul["bf16_over_tf32"], TF32_SHARE))
    out.append(target(f"|{mixed.split()[0]} final loss - fp32 mean| / fp32 run-to-run spread",
                      abs(low["final_loss"] - mean) / spread if spread else float("inf"), 1.0, "<="))
    return out


@register("tensorcores06_training", targets=training_targets)
def training_bench() -> dict:
    return training.compare(steps=training.STEPS_GPU)


@register("tensorcores06_ladder")
def ladder_bench() -> dict:
    return {"ladder": measure.dtype_ladder(), "alignment": measure.alignment()}
