"""Where a datasheet's tensor-core peak comes from: SMs x clock x dense MACs per clock per SM x 2.

A MAC (multiply-accumulate, a fused multiply-add) is two floating-point operations, so a GPU whose SMs each finish
``macs`` MACs per clock runs ``sms * clock * macs * 2`` flops per second at that clock. The per-SM rates below come
from NVIDIA's architecture whitepapers (each tensor core's dense rate per clock times the tensor cores per SM). The
clock is the one factor a datasheet does not print beside its TFLOP/s: :func:`implied_mhz` recovers it from the
datasheet figure (``gpucourse.specs``), and :func:`breakdown` shows the arithmetic for one GPU at the boost clocks
listed here, each checked against the clock its datasheet figure implies (tests/lessons/test_l06_tensor_cores.py).
Pure Python: it runs in CPU mode and on recorded figures.

The H100's tensor-core figures work out at 1830 MHz, while its FP32 figure (CUDA cores, not tensor cores) works
out at 1980 MHz, its maximum SM clock: the datasheet computes the two at different clocks. A100 and T4 use one clock
for both. Sparse ("with sparsity") datasheet figures are twice the dense ones and apply only to 2:4-sparse operands;
the course lists dense figures only.
"""
from __future__ import annotations

import dataclasses

from gpucourse import specs


@dataclasses.dataclass(frozen=True)
class SMRates:
    """Per-SM rates of one GPU, from its architecture whitepaper."""

    key: str  # gpucourse.specs key
    arch: str
    sms: int  # SMs of the datasheet's part (the SM count the datasheet's TFLOP/s assume)
    tensor_cores_per_sm: int
    macs_per_clock_per_sm: dict  # dtype -> dense tensor-core MACs per clock per SM
    fp32_lanes_per_sm: int  # FP32 CUDA-core lanes per SM (one FMA per lane per clock)
    tensor_mhz: int  # the clock the datasheet's tensor-core figures are computed at
    fp32_mhz: int  # the clock its FP32 (CUDA-core) figure is computed at
    source: str


_HOPPER = dict(arch="Hopper (sm90)", sms=132, tensor_cores_per_sm=4,
               macs_per_clock_per_sm={"tf32": 1024, "fp16": 2048, "bf16": 2048, "fp8": 4096, "int8": 4096},
               fp32_lanes_per_sm=128, tensor_mhz=1830, fp32_mhz=1980,
               source="NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): 132 SMs on the SXM5 part, 4 "
                      "fourth-generation tensor cores per SM, each with twice the dense rate per clock of an A100 "
                      "tensor core (512 fp16/bf16 MACs), FP8 twice that; 128 FP32 lanes per SM. Clocks: 1830 MHz "
                      "is the one the datasheet's tensor-core TFLOP/s imply, 1980 MHz (the maximum SM clock) the one "
                      "its FP32 TFLOP/s imply")
_AMPERE = dict(arch="Ampere (sm80)", sms=108, tensor_cores_per_sm=4,
               macs_per_clock_per_sm={"tf32": 512, "fp16": 1024, "bf16": 1024, "int8": 2048},
               fp32_lanes_per_sm=64, tensor_mhz=1410, fp32_mhz=1410,
               source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs, 4 third-generation "
                      "tensor cores per SM, 256 dense fp16 MACs per clock each; 64 FP32 lanes per SM; boost clock "
                      "1410 MHz")

RATES: dict[str, SMRates] = {r.key: r for r in [
    SMRates(key="H100-SXM", **_HOPPER),
    SMRates(key="H200", **_HOPPER),
    SMRates(key="A100-80GB", **_AMPERE),
    SMRates(key="A100-40GB", **_AMPERE),
    SMRates(key="T4", arch="Turing (sm75)", sms=40, tensor_cores_per_sm=8,
            macs_per_clock_per_sm={"fp16": 512, "int8": 1024}, fp32_lanes_per_sm=64, tensor_mhz=1590,
            fp32_mhz=1590,
            source="NVIDIA Turing GPU Architecture whitepaper (2018): the T4 has 40 SMs, 8 tensor cores per SM, 64 "
                   "fp16 MACs per clock each; 64 FP32 lanes per SM; boost clock 1590 MHz"),
]}


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def peak_tflops(sms: int, mhz: float, macs_per_clock_per_sm: float) -> float:
    """TFLOP/s of ``sms`` SMs at ``mhz`` doing ``macs_per_clock_per_sm`` MACs (2 flops each) per clock."""
    return (_positive("sms", sms) * _positive("mhz", mhz) * 1e6 * _positive("macs_per_clock_per_sm",
                                                                            macs_per_clock_per_sm) * 2 / 1e12)


def implied_mhz(tflops: float, sms: int, macs_per_clock_per_sm: float) -> float:
    """The clock (MHz) at which ``sms`` SMs doing ``macs_per_clock_per_sm`` MACs per clock reach ``tflops``."""
    return (_positive("tflops", tflops) * 1e12 / (2 * _positive("sms", sms)
                                                  * _positive("macs_per_clock_per_sm", macs_per_clock_per_sm)) / 1e6)


def rates(key: str) -> SMRates:
    """The per-SM rates of the GPU ``key`` (a ``gpucourse.specs`` key); KeyError naming the known ones."""
    if key not in RATES:
        raise KeyError(f"no per-SM rates for {key!r}; known: {', '.join(RATES)}")
    return RATES[key]


def breakdown(key: str, sms: int | None = None) -> list:
    """One row per dtype of the GPU ``key``: the peak computed as SMs x clock x MACs per clock per SM x 2 at the
    datasheet's clock for that unit, beside the datasheet's TFLOP/s and the clock that figure implies. ``sms``: the SM
    count to compute with (default: the datasheet part's; pass the count your GPU reports). The last row is the FP32
    CUDA-core rate (lanes x one FMA per clock), for comparison."""
    r, spec = rates(key), specs.SPECS[key]
    n = r.sms if sms is None else sms
    units = [(d, "tensor cores", m, r.tensor_mhz) for d, m in r.macs_per_clock_per_sm.items()]
    units.append(("fp32", "CUDA cores", r.fp32_lanes_per_sm, r.fp32_mhz))
    rows = []
    for dtype, unit, macs, mhz in units:
        sheet = spec.tflops.get(dtype)
        if not sheet:
            continue
        rows.append({"dtype": dtype, "unit": unit, "sms": n, "mhz": mhz, "macs_per_clock_per_sm": macs,
                     "computed": peak_tflops(n, mhz, macs), "datasheet": sheet,
                     "implied_mhz": implied_mhz(sheet, r.sms, macs)})
    return rows


def format_breakdown(key: str, sms: int | None = None) -> str:
    """:func:`breakdown` as lines of arithmetic: ``SMs x MHz x MACs x 2 = TFLOP/s (datasheet ...)``."""
    r = rates(key)
    lines = [f"{specs.SPECS[key].name}, {r.arch}: {r.tensor_cores_per_sm} tensor cores per SM; per-SM rates from "
             f"{r.source.split(':')[0]}"]
    for row in breakdown(key, sms):
        lines.append(f"  {row['dtype']:<5} {row['unit']:<13}{row['sms']} SMs x {row['mhz']:,} MHz x "
                     f"{row['macs_per_clock_per_sm']:>5,} MACs/clock/SM x 2 = {row['computed']:>8,.1f} TFLOP/s"
                     f"   (datasheet {row['datasheet']:,g}, which implies {row['implied_mhz']:,.0f} MHz)")
    return "\n".join(lines)


def peak_at(key: str, dtype: str, mhz: float, sms: int | None = None) -> float:
    """The tensor-core (or, for ``fp32``, CUDA-core) peak of GPU ``key`` in TFLOP/s at a clock of ``mhz``: what a
    datasheet figure becomes at the clock the GPU actually runs."""
    r = rates(key)
    macs = r.fp32_lanes_per_sm if dtype == "fp32" else r.macs_per_clock_per_sm.get(dtype)
    if macs is None:
        raise KeyError(f"{specs.SPECS[key].name} has no tensor-core rate for {dtype!r}; it has "
                       f"{', '.join(r.macs_per_clock_per_sm)}")
    return peak_tflops(r.sms if sms is None else sms, mhz, macs)
