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
