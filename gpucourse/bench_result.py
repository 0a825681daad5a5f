"""What a timing is worth: :class:`BenchResult` (the repeats of one function and what follows from them: median,
spread, GB/s and TFLOP/s from the bytes and flops declared, % of the device's datasheet peak) and the checks that
flag a throughput above that peak as a measurement error rather than a win. No timing is done here (timing.py does
it)."""
from __future__ import annotations

import dataclasses
import math
import statistics

from . import specs

OVER_PEAK_TOLERANCE = 1.02  # datasheet figures are rounded; 2% over is still "impossible" beyond that


@dataclasses.dataclass
class BenchResult:
    """Timing of one function. Times in milliseconds; ``samples`` holds every timed repeat."""

    name: str
    samples: list
    mode: str  # "gpu" or "cpu"
    bytes: float | None = None
    flops: float | None = None
    dtype: str | None = None
    flush_l2: bool | str = True
    peak_gbs: float | None = None
    peak_tflops: float | None = None
    warnings: list = dataclasses.field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples)

    @property
    def q25_ms(self) -> float:
        return _quantile(self.samples, 0.25)

    @property
    def q75_ms(self) -> float:
        return _quantile(self.samples, 0.75)

    @property
    def iqr_ms(self) -> float:
        return self.q75_ms - self.q25_ms

    @property
    def cv(self) -> float:
        """Coefficient of variation of the repeats (standard deviation / mean)."""
        if len(self.samples) < 2:
            return 0.0
        return statistics.stdev(self.samples) / statistics.mean(self.samples)

    @property
    def gbps(self) -> float | None:
        return gbps(self.bytes, self.median_ms) if self.bytes is not None else None

    @property
    def tflops(self) -> float | None:
        return tflops(self.flops, self.median_ms) if self.flops is not None else None

    @property
    def pct_of_peak_bw(self) -> float | None:
        if self.gbps is None or not self.peak_gbs:
            return None
        return 100.0 * self.gbps / self.peak_gbs

    @property
    def pct_of_peak_flops(self) -> float | None:
        if self.tflops is None or not self.peak_tflops:
            return None
        return 100.0 * self.tflops / self.peak_tflops

    @property
    def suspicious(self) -> bool:
        """True when a throughput is above what the device can physically do: the measurement is wrong."""
        return any(w.startswith("IMPOSSIBLE") for w in self.warnings)

    def summary(self) -> str:
        parts = [f"{self.name}: {format_ms(self.median_ms)} (IQR {format_ms(self.iqr_ms)}, n={len(self.samples)})"]
        if self.gbps is not None:
            pct = f", {self.pct_of_peak_bw:.0f}% of peak" if self.pct_of_peak_bw is not None else ""
            parts.append(f"{self.gbps:,.1f} GB/s{pct}")
        if self.tflops is not None:
            pct = f", {self.pct_of_peak_flops:.0f}% of peak" if self.pct_of_peak_flops is not None else ""
            parts.append(f"{self.tflops:,.2f} TFLOP/s{pct}")
        text = " | ".join(parts)
        for w in self.warnings:
            text += f"\n  ! {w}"
        return text

    __str__ = summary

    def __repr__(self) -> str:
        return f"<BenchResult {self.summary()}>"

    def to_dict(self) -> dict:
        return {"name": self.name, "mode": self.mode, "median_ms": self.median_ms, "q25_ms": self.q25_ms,
                "q75_ms": self.q75_ms, "cv": self.cv, "n": len(self.samples), "bytes": self.bytes,
                "flops": self.flops, "dtype": self.dtype, "flush_l2": self.flush_l2, "gbps": self.gbps,
                "tflops": self.tflops, "pct_of_peak_bw": self.pct_of_peak_bw,
                "pct_of_peak_flops": self.pct_of_peak_flops, "warnings": list(self.warnings)}


def _quantile(xs, q: float) -> float:
    ys = sorted(xs)
    if len(ys) == 1:
        return ys[0]
    pos = q * (len(ys) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def gbps(nbytes: float, ms: float) -> float:
    """Bytes moved in ``ms`` milliseconds, as GB/s (1 GB = 1e9 bytes)."""
    return nbytes / (ms * 1e-3) / 1e9


def tflops(nflops: float, ms: float) -> float:
    """Floating-point operations done in ``ms`` milliseconds, as TFLOP/s (1e12 per second)."""
    return nflops / (ms * 1e-3) / 1e12


def format_ms(ms: float) -> str:
    if ms < 1e-3:
        return f"{ms * 1e6:.0f} ns"
    if ms < 1:
        return f"{ms * 1e3:.1f} µs"
    if ms < 1000:
        return f"{ms:.3f} ms"
    return f"{ms / 1000:.2f} s"


def peak_check(result: BenchResult) -> list:
    """Warnings for throughputs above the device's datasheet peak (a measurement error, not a fast kernel)."""
    out = []
    if result.gbps is not None and result.peak_gbs and result.gbps > result.peak_gbs * OVER_PEAK_TOLERANCE:
        why = ("the data stayed in L2 because flush_l2=False" if not result.flush_l2
               else "the work was not synchronized (asynchronous launch timed), the declared bytes are too high, "
                    "or the data fits in L2")
        out.append(f"IMPOSSIBLE: {result.gbps:,.0f} GB/s is above this GPU's peak memory bandwidth "
                   f"({result.peak_gbs:,.0f} GB/s). Likely cause: {why}.")
    if result.tflops is not None and result.peak_tflops and result.tflops > result.peak_tflops * OVER_PEAK_TOLERANCE:
        out.append(f"IMPOSSIBLE: {result.tflops:,.1f} TFLOP/s is above this GPU's peak "
                   f"({result.peak_tflops:,.1f} TFLOP/s for {result.dtype or 'any dtype'}). Likely cause: the work "
                   f"was not synchronized, the declared flops are too high, or the kernel skipped work.")
    return out


def device_peaks(dtype) -> tuple:
    """(peak GB/s, peak TFLOP/s for ``dtype``) of the current device from its datasheet; (None, None) where unknown."""
    spec = specs.current()
    if spec is None:
        return None, None
    if dtype is None:  # no dtype declared: only the highest rate of any dtype is a hard ceiling
        flops = max(v for v in spec.tflops.values() if v)
    else:
        flops = spec.peak_tflops(str(dtype))
    return spec.bandwidth_gbs, flops

