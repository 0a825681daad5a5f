"""Datasheet peaks for common GPUs, each with its source.

Figures are *dense* peaks (no 2:4 sparsity) at boost clock: memory bandwidth in GB/s (1 GB = 1e9 bytes) and math
throughput in TFLOP/s (TOPS for int8). ``fp32`` is the CUDA-core rate; the other dtypes are tensor-core rates with
fp32 accumulation where the datasheet distinguishes (GeForce cards accumulate in fp16 twice as fast; we list the
fp32-accumulate figure because that is what deep-learning kernels use). ``None`` means the chip has no tensor-core
path for that dtype. These are ceilings a kernel never quite reaches: the course measures the real ones with
``gpucourse doctor --measure`` and compares.
"""
from __future__ import annotations

import dataclasses
import re

from . import dtypes


@dataclasses.dataclass(frozen=True)
class GPUSpec:
    key: str
    name: str
    sm: int  # compute capability as a number (75 = 7.5)
    bandwidth_gbs: float
    tflops: dict  # dtype name -> dense TFLOP/s (or TOPS for int8); None = not supported by tensor cores
    l2_mb: float
    source: str

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense TFLOP/s for ``dtype`` (any name :mod:`gpucourse.dtypes` knows, or "tf32"); None when the chip has no
        tensor-core rate for it or the dtype is not one the table lists."""
        try:
            return self.tflops.get(dtypes.short(dtype))
        except ValueError:
            return None


SPECS: dict[str, GPUSpec] = {s.key: s for s in [
    GPUSpec("T4", "Tesla T4", 75, 320,
            {"fp32": 8.1, "tf32": None, "fp16": 65, "bf16": None, "fp8": None, "int8": 130}, 4,
            "NVIDIA T4 datasheet (nvidia.com/en-us/data-center/tesla-t4)"),
    GPUSpec("L4", "NVIDIA L4", 89, 300,
            {"fp32": 30.3, "tf32": 60, "fp16": 121, "bf16": 121, "fp8": 242.5, "int8": 242.5}, 48,
            "NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4); sparse figures halved"),
    GPUSpec("A10G", "NVIDIA A10G", 86, 600,
            {"fp32": 35, "tf32": 35, "fp16": 70, "bf16": 70, "fp8": None, "int8": 140}, 6,
            "AWS G5 (A10G) figures as tabulated in Baseten's 'NVIDIA A10 vs A10G' (baseten.co/blog); "
            "NVIDIA publishes no A10G datasheet"),
    GPUSpec("A100-40GB", "NVIDIA A100 40GB (SXM4/PCIe)", 80, 1555,
            {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312, "fp8": None, "int8": 624}, 40,
            "NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100); sparse figures halved"),
    GPUSpec("A100-80GB", "NVIDIA A100 80GB SXM4", 80, 2039,
            {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312, "fp8": None, "int8": 624}, 40,
            "NVIDIA A100 datasheet, 80GB SXM column; the 80GB PCIe card has 1935 GB/s"),
    GPUSpec("H100-SXM", "NVIDIA H100 SXM5 80GB", 90, 3350,
            {"fp32": 67, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9, "int8": 1978.9}, 50,
            "NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100), SXM column; sparse figures halved"),
    GPUSpec("H100-PCIe", "NVIDIA H100 PCIe 80GB", 90, 2000,
            {"fp32": 51, "tf32": 378, "fp16": 756, "bf16": 756, "fp8": 1513, "int8": 1513}, 50,
            "NVIDIA H100 datasheet, PCIe column; sparse figures halved"),
    GPUSpec("H200", "NVIDIA H200 SXM 141GB", 90, 4800,
            {"fp32": 67, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9, "int8": 1978.9}, 60,
            "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200), SXM column; sparse figures halved"),
    GPUSpec("RTX3090", "NVIDIA GeForce RTX 3090", 86, 936,
            {"fp32": 35.6, "tf32": 35.6, "fp16": 71, "bf16": 71, "fp8": None, "int8": 284}, 6,
            "NVIDIA Ampere GA102 whitepaper, Table 9 (fp32-accumulate, dense)"),
    GPUSpec("RTX4090", "NVIDIA GeForce RTX 4090", 89, 1008,
            {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2, "fp8": 330.3, "int8": 660.6}, 72,
            "NVIDIA Ada Lovelace architecture whitepaper, Appendix A (fp32-accumulate, dense)"),
    GPUSpec("RTX5090", "NVIDIA GeForce RTX 5090", 120, 1792,
            {"fp32": 104.8, "tf32": 104.8, "fp16": 209.5, "bf16": 209.5, "fp8": 419, "int8": 838}, 96,
            "NVIDIA RTX Blackwell GPU architecture whitepaper, Appendix (fp32-accumulate, dense)"),
]}

# Device names as torch reports them, matched in order (first hit wins).
_NAME_PATTERNS = [
    (r"\bT4\b", "T4"),
    (r"\bL4\b", "L4"),
    (r"\bA10G\b", "A10G"),
    (r"A100.*80\s?GB", "A100-80GB"),
    (r"A100", "A100-40GB"),
    (r"H100.*PCIe", "H100-PCIe"),
    (r"H100", "H100-SXM"),  # "NVIDIA H100 80GB HBM3" is the SXM part
    (r"H200", "H200"),
    (r"RTX 3090", "RTX3090"),
    (r"RTX 4090", "RTX4090"),
    (r"RTX 5090", "RTX5090"),
]


def lookup(device_name: str) -> GPUSpec | None:
    """The spec for a device name such as torch reports it ("NVIDIA H100 80GB HBM3", "Tesla T4"), or None."""
    for pattern, key in _NAME_PATTERNS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return SPECS[key]
    return None


def current() -> GPUSpec | None:
    """The spec of the current CUDA device, or None (CPU mode, or a GPU that is not in the table)."""
    from . import device

    p = device.hardware_props()  # the chip's own figures, also where $GPUCOURSE_CAPABILITY lowers the capability
    return lookup(p.name) if p else None


def slug() -> str:
    """This GPU's name for results files (``h100`` for ``benchmarks/results/h100.json``): the spec table's key in
    lower case without "-sxm", else the device's own name made file-safe."""
    from . import device

    spec = current()
    if spec is None:
        name = device.hardware_props().name
        return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return spec.key.lower().replace("-sxm", "")
