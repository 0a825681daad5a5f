"""The H100 figures lesson 06 shows, labelled as recorded, where a cell cannot measure on this machine (CPU mode, no
FP8 tensor cores). They come from the lesson's curated file ``benchmarks/results/recorded/h100-l06_tensor_cores.json``
(:mod:`gpucourse.recorded`), read by its stable keys.

``python -m gpucourse.lessons.l06_tensor_cores.recorded promote`` writes that file from the lab's runs: its section
at the end of this module is the only place that knows their files and labels.
"""
from __future__ import annotations

import sys

from gpucourse import recorded as curated

LESSON = "l06_tensor_cores"

KEYS = {
    "ladder": "the 8192³ matmul in each dtype: {n, tflops: {dtype: TFLOP/s}, peak: {dtype: datasheet TFLOP/s}, "
              "skipped} (measure.dtype_ladder's result)",
    "alignment_k_sweep": "cuBLAS TFLOP/s at K around 8192, as is and zero-padded, one run per K "
                         "(measure.alignment's result)",
    "wave_sweep": "the fixed-tile Triton kernel and cuBLAS at every N, M = K = 8192 (measure.wave_sweep's result)",
    "training_summary": "the tiny GPT's step time, memory and final loss per precision mode (training.summary's text)",
    "fp8_precise_tflops": "{M x N x K: {fp8_matmul, _scaled_mm}}: TFLOP/s of the workbook's fp8_matmul (precise=True) "
                          "and torch._scaled_mm's default, from one interleaved run",
    "fp8_fast_tflops": "{M x N x K: {fp8_matmul, _scaled_mm}}: TFLOP/s with fast accumulation on both, from one "
                       "interleaved run",
    "fp8_fast_over_l05_bf16": "fp8_matmul with fast accumulation over lesson 05's bf16 Triton matmul at 8192³",
    "fp8_accuracy": "{m, n, k: [K...], <name>: [relative error per K]} for the names of measure.ACCURACY_NAMES",
    "fp8_hopper": "the Hopper kernel (hopper_fp8.fp8_matmul: persistent, TMA) against torch._scaled_mm like for like, "
                  "as measure.fp8_like_for_like returns it: {rounds, shapes: {M x N x K: {tflops, tflops_range, "
                  "precise, precise_range, fast, fast_range}}} (its rows are named fp8_matmul)",
}


def h100() -> curated.Recorded:
    """The lesson's recorded H100 values, indexed by the keys of :data:`KEYS`."""
    return curated.load(LESSON)


def label(doc: curated.Recorded) -> str:
    """"recorded on an NVIDIA H100 80GB HBM3 (torch ..., triton ...), not measured here"."""
    return doc.label()


def ratio_fp8_over_bf16(doc: curated.Recorded) -> float:
    """fp8_matmul (fast accumulation) over lesson 05's bf16 Triton matmul at 8192³ as recorded."""
    return doc["fp8_fast_over_l05_bf16"]


def fp8_modes(doc: curated.Recorded) -> str:
    """The recorded FP8 runs as a like-for-like table: fp8_matmul precise against ``_scaled_mm``'s default,
    fp8_matmul fast against ``use_fast_accum=True`` (8192³ only). Each pair comes from one interleaved run of 3
    rounds; the two modes come from separate runs."""
    fast = doc["fp8_fast_tflops"]
    head = "precise: fp8_matmul / _scaled_mm (TFLOP/s)"
    lines = [f"{'M x N x K':<18}{head:>46}{'fast: fp8_matmul / _scaled_mm':>38}"]
    for shape, t in doc["fp8_precise_tflops"].items():
        mine, theirs = t["fp8_matmul"], t["_scaled_mm"]
        line = f"{shape:<18}{mine:>14,.0f} / {theirs:,.0f} = {mine / theirs:.2f}".ljust(64)
        if shape in fast:
            mine, theirs = fast[shape]["fp8_matmul"], fast[shape]["_scaled_mm"]
            line += f"{mine:>8,.0f} / {theirs:,.0f} = {mine / theirs:.2f}"
        lines.append(line.rstrip())
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# The promote step: the lab's runs -> the curated file. The lab's labels appear here only.

FIRST, SECOND = "lab/results/h100-explore-tensor-cores.json", "lab/results/h100-explore-tensor-cores-2.json"
HOPPER = "benchmarks/results/h100-l06-fp8-hopper.json"  # bench.fp8_hopper_result() on the course's H100
# the second run named the accuracy series by who ran and how; the lesson names them as measure.ACCURACY_NAMES does
_ACCURACY_LABELS = {"yours": "fp8_matmul precise", "yours, fast accumulation": "fp8_matmul fast",
                    "_scaled_mm": "_scaled_mm precise", "_scaled_mm fast accum": "_scaled_mm fast"}


def promote_values(first: dict, second: dict, hopper: dict) -> dict:
    """The curated values from the two lab runs' results (``doc["results"]``): the second run's FP8 table (the
    workbook kernel with precise=True), accuracy and training; the first run's ladder, alignment, wave sweep and its
    fp8 over bf16 ratio (its fp8_matmul used fast accumulation); and the Hopper kernel's run (``bench
    .fp8_hopper_result``'s document, :data:`HOPPER`)."""
    fp8 = second["fp8"]
    acc = second["fp8_accuracy"]
    accuracy = {"m": acc["m"], "n": acc["n"], "k": acc["k"]}
    accuracy.update({name: acc[lab] for lab, name in _ACCURACY_LABELS.items() if lab in acc})
    return {
        "ladder": {k: v for k, v in first["ladder"].items() if k != "seconds"},
        "alignment_k_sweep": first["alignment"]["k_sweep"],
        "wave_sweep": first["waves"]["sweep"],
        "training_summary": second["training"]["summary"],
        "fp8_precise_tflops": {shape: {"fp8_matmul": r["tflops"]["yours"], "_scaled_mm": r["tflops"]["_scaled_mm"]}
                               for shape, r in fp8["table"].items()},
        "fp8_fast_tflops": {shape: {"fp8_matmul": r["tflops"]["yours"],
                                    "_scaled_mm": r["tflops"]["_scaled_mm fast accum"]}
                            for shape, r in fp8.get("fast_accumulation_8192", {}).items()},
        "fp8_fast_over_l05_bf16": first["bf16_triton"]["fp8_over_l05_bf16"],
        "fp8_accuracy": accuracy,
        "fp8_hopper": {"rounds": hopper["rounds"],
                       "shapes": {shape: {k: r[k] for k in ("tflops", "tflops_range", "precise", "precise_range",
                                                             "fast", "fast_range")}
                                  for shape, r in hopper["shapes"].items()}},
    }


def promote() -> str:
    """Write the curated file from the lab's two runs and the Hopper kernel's run; returns its path."""
    import json
    import os

    from gpucourse.workbooks import ROOT

    docs = []
    for rel in (FIRST, SECOND, HOPPER):
        with open(os.path.join(ROOT, rel)) as f:
            docs.append(json.load(f))
    sources = [curated.source(rel) for rel in (FIRST, SECOND, HOPPER)]
    return curated.promote(LESSON, promote_values(docs[0]["results"], docs[1]["results"], docs[2]), KEYS, sources,
                           docs[1].get("environment"))


if __name__ == "__main__":
    if sys.argv[1:] != ["promote"]:
        sys.exit(f"usage: python -m gpucourse.lessons.{LESSON}.recorded promote")
    print(promote())
