"""Lesson 07: the quantized GEMVs against bf16 cuBLAS, the torch paths, torchao and the copy ceiling.

The workbook's solutions (``solutions/07_quantization.ipynb``, the one place they live) are the kernels the targets
are held to; the lesson's kernels (:mod:`.kernels`, which add tensor-core paths: for larger batches, and on an H100
for M = 1 as well) are timed beside them, and drive the batch sweep and the MLP block. Every ratio is measured within
one run (see :mod:`.measure`).
The lesson's notebook measures these in its own cells and hands the results to ``gpucourse.benchmarks.record``.
"""
from __future__ import annotations

from gpucourse import dtypes
from gpucourse.benchmarks import register, target

from . import kernels, measure


def solutions() -> dict:
    from gpucourse.solutions import cached_solutions
    from . import LESSON

    return cached_solutions(LESSON.notebook)


def _low(res: dict) -> str:
    """The baseline's 16-bit type for the targets' names: "bf16" ("fp16" where a T4 ran the measurement in fp16;
    the result's keys keep the course machine's names)."""
    return dtypes.short(res.get("dtype", "bfloat16"))


def gemv_targets(res: dict) -> list:
    out, low = [], _low(res)
    notes = res.get("notes", {})
    for row in res["rows"]:
        us, shape = row["us"], "x".join(map(str, row["shape"]))
        bf = us["bf16 cuBLAS"]
        out.append(target(f"int8 GEMV M=1 {shape} / {low} cuBLAS", bf / us["int8 (ours)"], 1.8))
        out.append(target(f"int4 GEMV g128 M=1 {shape} / {low} cuBLAS", bf / us["int4 (ours)"], 3.2))
        peer = "int8 torchao weight-only (compiled)"
        if peer in us:
            out.append(target(f"int8 GEMV {shape} / {peer}", us[peer] / us["int8 (ours)"], 1.8))
            out.append(target(f"int4 GEMV {shape} / {peer}", us[peer] / us["int4 (ours)"], 1.8))
        elif "torchao" in notes:
            out.append(target(f"GEMV {shape} / torchao: not measured ({notes['torchao'][:60]})", 0.0, 1.8))
    return out


def mlp_targets(res: dict) -> list:
    us, low = res["us"], _low(res)
    return [target(f"MLP block decode step (M={res['m']}, {res['hidden']}x{res['inter']}) int4 / {low}",
                   us["bf16"] / us["int4"], 2.5),
            target(f"MLP block decode step (M={res['m']}) int8 / {low}", us["bf16"] / us["int8"], 1.6)]


def sweep_targets(res: dict) -> list:
    us = res["us"]
    i = res["ms"].index(1)
    return [target(f"batch sweep, int4 at M=1 / {_low(res)} cuBLAS", us["bf16 cuBLAS"][i] / us["int4 (ours)"][i],
                   3.2)]


@register("quant07_gemv", targets=gemv_targets)
def gemv_bench() -> dict:
    """M = 1 on the three shapes: the workbook's int8_gemv and int4_gemv ("ours"), the lesson's kernels, bf16
    cuBLAS, torch eager and compiled dequantize-then-matmul (torchao: ``quant07_torchao``)."""
    sol = solutions()
    return measure.peers(int8_fn=sol["int8_gemv"], int4_fn=sol["int4_gemv"],
                         extra={"int8 (lesson kernel)": kernels.w8a16_gemv,
                                "int4 (lesson kernel)": measure.lesson_int4})


@register("quant07_torchao", targets=gemv_targets)
def torchao_bench() -> dict:
    """M = 1 on the three shapes: the workbook's GEMVs against torchao's int8 weight-only layer (compiled), with
    bf16 cuBLAS and the eager torch path, all in one run. Apart from ``quant07_gemv`` because torchao's native code
    is outside the course's control (its version must match torch's); the notebook runs it in a child process."""
    sol = solutions()
    return measure.peers(int8_fn=sol["int8_gemv"], int4_fn=sol["int4_gemv"], compile=False, with_torchao=True)


@register("quant07_batch_sweep", targets=sweep_targets)
def batch_sweep_bench() -> dict:
    """M = 1..256 on 8192 x 8192, the lesson's kernels against bf16 cuBLAS: where weight-only stops paying."""
    return measure.batch_sweep()


@register("quant07_mlp_decode", targets=mlp_targets)
def mlp_decode_bench() -> dict:
    """One decode step of a Llama-sized MLP block (hidden 4096, intermediate 14336) with bf16, int8, int4 weights."""
    return measure.mlp_decode()
