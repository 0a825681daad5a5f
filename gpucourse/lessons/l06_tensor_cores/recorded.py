"""The H100 figures recorded by ``benchmarks/explore_tensor_cores.py`` (committed under ``benchmarks/results/``), for
cells that cannot measure on this machine: they show the recorded figure, labelled as such."""
from __future__ import annotations

import json
import os

FILES = ("h100-explore-tensor-cores.json", "h100-explore-tensor-cores-2.json")


def h100() -> dict:
    """Every recorded section, later files overriding earlier ones, with the environment they were measured in."""
    from gpucourse.workbooks import ROOT

    out = {"results": {}, "environment": None}
    for name in FILES:
        path = os.path.join(ROOT, "benchmarks", "results", name)
        if os.path.exists(path):
            with open(path) as f:
                doc = json.load(f)
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
    from gpucourse.workbooks import ROOT

    with open(os.path.join(ROOT, "benchmarks", "results", FILES[0])) as f:
        return json.load(f)["results"]["bf16_triton"]["fp8_over_l05_bf16"]
