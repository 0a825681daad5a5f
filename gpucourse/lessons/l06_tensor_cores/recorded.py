"""The H100 figures recorded by ``benchmarks/explore_tensor_cores.py`` (committed under ``benchmarks/results/``), for
cells that cannot measure on this machine: they show the recorded figure, labelled as such."""
from __future__ import annotations

import os

from gpucourse import benchmarks

FILES = ("h100-explore-tensor-cores.json", "h100-explore-tensor-cores-2.json")


def h100() -> dict:
    """Every recorded section, later files overriding earlier ones, with the environment they were measured in."""
    out = {"results": {}, "environment": None}
    for name in FILES:
        if os.path.exists(os.path.join(benchmarks.results_dir(), name)):
            doc = benchmarks.recorded(name)
            out["results"].update({k: v for k, v in doc["results"].items() if "error" not in v})
            out["environment"] = doc.get("environment")
    return out


def label(doc: dict) -> str:
    env = doc.get("environment") or {}
    return (f"recorded on an {env.get('gpu', 'H100')} (torch {env.get('torch', '?')}, triton {env.get('triton', '?')})"
            f", not measured here")


def ratio_fp8_over_bf16(doc: dict) -> float:
    """fp8_matmul (fast accumulation) over lesson 05's bf16 Triton matmul at 8192³ as recorded (the first
    exploration run, whose fp8_matmul used fast accumulation)."""
    return benchmarks.recorded(FILES[0])["results"]["bf16_triton"]["fp8_over_l05_bf16"]


def fp8_modes(doc: dict) -> str:
    """The recorded FP8 runs as a like-for-like table: fp8_matmul precise against ``_scaled_mm``'s default (the
    second file's table, where the workbook kernel ran with precise=True), fp8_matmul fast against
    ``use_fast_accum=True`` (its 8192³ fast-accumulation run). Each pair comes from one interleaved run of 3 rounds;
    the two modes come from separate runs."""
    fp8 = doc["results"]["fp8"]
    fast = fp8.get("fast_accumulation_8192", {})
    head = "precise: fp8_matmul / _scaled_mm (TFLOP/s)"
    lines = [f"{'M x N x K':<18}{head:>46}{'fast: fp8_matmul / _scaled_mm':>38}"]
    for shape, r in fp8["table"].items():
        t = r["tflops"]
        mine, theirs = t["yours"], t["_scaled_mm"]
        line = f"{shape:<18}{mine:>14,.0f} / {theirs:,.0f} = {mine / theirs:.2f}".ljust(64)
        if shape in fast:
            mine, theirs = fast[shape]["tflops"]["yours"], fast[shape]["tflops"]["_scaled_mm fast accum"]
            line += f"{mine:>8,.0f} / {theirs:,.0f} = {mine / theirs:.2f}"
        lines.append(line.rstrip())
    return "\n".join(lines)
