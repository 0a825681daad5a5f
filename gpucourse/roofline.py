"""Arithmetic intensity and the roofline: how many flops an operation does per byte it moves, and what bounds it.

An operation needs ``flops`` floating-point operations and must move ``bytes`` through device memory (every input
read once, every output written once: the least any implementation can move). Its *arithmetic intensity* is
``flops / bytes``. A GPU has two ceilings, a memory bandwidth (bytes/s) and a math rate (flop/s); their quotient is
the device's *ops:byte ratio*. An operation whose intensity is below that ratio cannot keep the math units busy: it is
memory-bound, and its best possible time is ``bytes / bandwidth``. Above it, it is compute-bound and its best time is
``flops / math rate``. The roofline plot draws exactly this: attainable flop/s = min(math rate, intensity x bandwidth).

Ceilings come from measurement on a GPU (:func:`measured_ceilings`: a large copy and a large matmul, via
``gpucourse.doctor.measure``). In CPU mode there is nothing to measure, so :func:`device_ceilings` returns an H100's
*datasheet* figures, labelled as such: they illustrate the idea, they are not a measurement.

Two math ceilings, not one. Matrix products in bf16/fp16 (and tf32, fp8) run on the *tensor cores*; everything else
(elementwise ops, reductions, a GEMV, fp32 matmuls without tf32) runs on the *CUDA cores*, whose fp32 rate is an
order of magnitude lower (H100 SXM: 67 against 989 TFLOP/s). ``Ceilings.fp32_tflops`` holds that second roof; when it
is set, :func:`predict` judges CUDA-core ops against it. On CUDA cores the work is counted in *instructions*, not
flops: each fp32 instruction takes one issue slot per lane, an FMA does two flops in one, and a ``sin`` takes many
(``Op.instructions``; the datasheet rate is ``2 x`` the instruction rate, as it counts an FMA as two flops).

The formulas (``s`` = bytes per element of the dtype):

==============  ===========================================  ==============================================
operation        flops                                         bytes (least possible)
==============  ===========================================  ==============================================
elementwise      ``f * n`` (f flops per output element)         ``(inputs + 1) * n * s``
reduction        ``rows * cols`` (one add per element)          ``(rows * cols + rows) * s``
GEMV y = A x     ``2 * M * K``                                  ``(M * K + K + M) * s``
GEMM C = A B     ``2 * M * N * K``                              ``(M * K + K * N + M * N) * s``
==============  ===========================================  ==============================================
"""
from __future__ import annotations

import dataclasses
import functools

from . import dtypes, plots

@dataclasses.dataclass(frozen=True)
class Op:
    """One operation: its name, category, the flops it does and the least bytes it must move."""

    name: str
    kind: str  # "elementwise", "reduction", "gemv" or "gemm"
    flops: float
    bytes: float
    dtype: str
    params: dict = dataclasses.field(default_factory=dict, compare=False)
    instructions_declared: float | None = None  # fp32 instructions on CUDA cores, where they differ from the default

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in flops per byte."""
        return self.flops / self.bytes

    @property
    def instructions(self) -> float:
        """fp32 instruction issues the op needs on CUDA cores: as declared (a ``sin`` is many), else one per flop for
        elementwise ops and reductions, one FMA per two flops for GEMV and GEMM."""
        if self.instructions_declared is not None:
            return self.instructions_declared
        return self.flops / 2 if self.kind in ("gemv", "gemm") else self.flops

    @property
    def slot_intensity(self) -> float:
        """CUDA-core intensity in FMA-equivalent flops per byte: ``2 * instructions / bytes`` (each issue slot could
        have done one FMA, two flops), the x-coordinate against the fp32 roof."""
        return 2 * self.instructions / self.bytes


def elementwise(n: int, dtype="float32", inputs: int = 1, flops_per_element: float = 1, name: str | None = None,
                instructions_per_element: float | None = None) -> Op:
    """``out[i] = f(a[i], b[i], ...)`` over ``n`` elements: each input read once, the output written once.

    ReLU in float32: 1 flop (a comparison), 4 bytes read + 4 written, so 1/8 flop per byte.
    ``instructions_per_element``: fp32 instructions per element where they are not one per flop (a ``sin`` is one
    "flop" in a formula and a dozen or more instructions on the GPU); default: ``flops_per_element``.
    """
    s = dtypes.nbytes(dtype)
    params = {"n": n, "inputs": inputs, "flops_per_element": flops_per_element}
    instr = None
    if instructions_per_element is not None:
        params["instructions_per_element"] = instructions_per_element
        instr = float(instructions_per_element * n)
    return Op(name or f"elementwise n={n}", "elementwise", float(flops_per_element * n), float((inputs + 1) * n * s),
              dtypes.name(dtype), params, instr)


def reduction(rows: int, cols: int, dtype="float32", name: str | None = None) -> Op:
    """Sum each row of a (rows, cols) matrix: one add per element read, one value written per row."""
    s = dtypes.nbytes(dtype)
    return Op(name or f"row sum {rows}x{cols}", "reduction", float(rows * cols), float((rows * cols + rows) * s),
              dtypes.name(dtype), {"rows": rows, "cols": cols})


def gemv(m: int, k: int, dtype="bfloat16", name: str | None = None) -> Op:
    """``y = A @ x`` with A (M, K): a multiply and an add per element of A; A, x read once, y written once.

    The matrix dominates the bytes and each of its elements is used once, so the intensity stays near 1 flop per
    element of A, whatever the size: a GEMV (a linear layer at batch size 1) is memory-bound on every GPU.
    """
    s = dtypes.nbytes(dtype)
    return Op(name or f"GEMV {m}x{k}", "gemv", float(2 * m * k), float((m * k + k + m) * s), dtypes.name(dtype),
              {"M": m, "K": k})


def gemm(m: int, n: int, k: int, dtype="bfloat16", name: str | None = None) -> Op:
    """``C = A @ B`` with A (M, K), B (K, N): ``2 M N K`` flops (a multiply-add per term), A and B read once, C
    written once. With 2-byte elements the intensity is ``M N K / (M K + K N + M N)``: 8192x128x8192 gives about
    124 flop/byte, 8192^3 about 2731 (the figures in Molchanov's talk)."""
    s = dtypes.nbytes(dtype)
    return Op(name or f"GEMM {m}x{n}x{k}", "gemm", float(2 * m * n * k), float((m * k + k * n + m * n) * s),
              dtypes.name(dtype), {"M": m, "N": n, "K": k})


_MAKERS = {"elementwise": elementwise, "reduction": reduction, "gemv": gemv, "gemm": gemm}
_FIELDS = {"elementwise": ("n", "inputs", "flops_per_element"), "reduction": ("rows", "cols"), "gemv": ("M", "K"),
           "gemm": ("M", "N", "K")}


def from_dict(d: dict, name: str | None = None) -> Op:
    """An Op from a plain description such as ``{"kind": "gemm", "M": 8192, "N": 128, "K": 8192, "dtype":
    "bfloat16"}`` (the form the ``roofline_classify`` exercise hands out)."""
    kind = d.get("kind")
    if kind not in _MAKERS:
        raise ValueError(f"op kind must be one of {sorted(_MAKERS)}, not {kind!r}")
    missing = [f for f in _FIELDS[kind] if f not in d]
    if missing:
        raise ValueError(f"a {kind} op needs {list(_FIELDS[kind])} and 'dtype'; missing {missing}")
    args = [d[f] for f in _FIELDS[kind]]
    if kind == "elementwise":
        return elementwise(args[0], d.get("dtype", "float32"), inputs=args[1], flops_per_element=args[2], name=name)
    return _MAKERS[kind](*args, dtype=d.get("dtype", "float32"), name=name)


# ---------------------------------------------------------------------------------------------------------------------
# Ceilings and predictions.


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """A device's two ceilings: memory bandwidth in GB/s (1e9 B/s) and math rate in TFLOP/s (1e12 flop/s).

    ``source`` says where they come from ("measured on ..." or "datasheet ..."); ``measured`` is True only for
    ceilings measured on this machine's GPU.
    """

    gbps: float
    tflops: float
    source: str
    measured: bool = False
    dtype: str = "bfloat16"  # the dtype the math ceiling is for (tensor cores)
    fp32_tflops: float | None = None  # the CUDA-core fp32 rate (an FMA = 2 flops); None: one roof only

    @property
    def ops_per_byte(self) -> float:
        return ops_per_byte(self)


def ops_per_byte(ceilings: Ceilings) -> float:
    """The device's ops:byte ratio: flops it can do in the time it moves one byte (math rate / bandwidth).

    Operations with a lower arithmetic intensity are memory-bound on this device; higher ones are compute-bound.
    """
    return ceilings.tflops * 1e12 / (ceilings.gbps * 1e9)


def cuda_core_ops_per_byte(ceilings: Ceilings) -> float | None:
    """The CUDA-core ridge: fp32 rate / bandwidth, in FMA-equivalent flops per byte (None without an fp32 roof)."""
    if not ceilings.fp32_tflops:
        return None
    return ceilings.fp32_tflops * 1e12 / (ceilings.gbps * 1e9)


TENSOR_CORE_DTYPES = ("bfloat16", "float16", "tfloat32", "float8_e4m3fn", "float8_e5m2")


def on_tensor_cores(op: Op) -> bool:
    """True for the ops the tensor cores run: GEMMs in a tensor-core dtype. GEMVs (one use per matrix element),
    elementwise ops and reductions run on the CUDA cores."""
    return op.kind == "gemm" and op.dtype in TENSOR_CORE_DTYPES


def spec_ceilings(key: str = "H100-SXM", dtype="bfloat16", fp32: bool = False) -> Ceilings:
    """Datasheet ceilings of a GPU in ``gpucourse.specs.SPECS`` (not a measurement). ``fp32``: also the CUDA-core
    fp32 roof (``Ceilings.fp32_tflops``)."""
    from . import specs

    spec = specs.SPECS[key]
    name = dtypes.name(dtype)
    tf, source = spec.peak_tflops(name), f"datasheet {spec.name} ({spec.source})"
    if not tf:  # e.g. bf16 on a T4: no tensor-core rate, the math runs at the fp32 rate
        tf, source = spec.peak_tflops("fp32"), f"{source}; no {name} rate listed, its fp32 rate used"
    fp32_tf = float(spec.peak_tflops("fp32")) if fp32 else None
    return Ceilings(gbps=float(spec.bandwidth_gbs), tflops=float(tf), source=source, measured=False, dtype=name,
                    fp32_tflops=fp32_tf)


@functools.lru_cache(maxsize=1)
def measured_ceilings() -> Ceilings:
    """Ceilings measured on this GPU: a 1 GiB copy and a large matmul (``gpucourse.doctor.measure``). GPU only."""
    from . import device, doctor

    device.require_gpu("Measuring the roofline's ceilings")
    m = doctor.measure()
    name = device.props().name
    return Ceilings(gbps=float(m["copy_gbps"]), tflops=float(m["matmul_tflops"]),
                    source=f"measured on {name}: copy {m['copy_gbps']:,.0f} GB/s, "
                           f"{m['matmul_dtype']} matmul {m['matmul_size']}^3 {m['matmul_tflops']:,.0f} TFLOP/s",
                    measured=True, dtype=m["matmul_dtype"])


def device_ceilings(measure: bool = True, fp32: bool = False) -> Ceilings:
    """The ceilings for this session: measured on a GPU (``measure=False``: its datasheet, if the GPU is in the
    spec table); in CPU mode an H100 SXM's datasheet figures, labelled as illustrative. ``fp32``: with the
    CUDA-core roof from the datasheet (a measured one: lesson 03's ``measure.ceilings``)."""
    from . import device, specs

    if device.on_gpu():
        if measure:
            return measured_ceilings()
        spec = specs.current()
        if spec is None:
            return measured_ceilings()
        return spec_ceilings(spec.key, fp32=fp32)
    c = spec_ceilings("H100-SXM", fp32=fp32)
    return dataclasses.replace(c, source="illustrative, CPU mode: " + c.source)


@dataclasses.dataclass(frozen=True)
class Prediction:
    op: Op
    seconds: float  # max(memory_seconds, math_seconds): the roofline's lower bound on time
    bound: str  # "memory" or "compute"
    memory_seconds: float
    math_seconds: float
    roof: str = "tensor cores"  # the math ceiling used: "tensor cores" or "CUDA cores (fp32)"

    @property
    def attainable_tflops(self) -> float:
        """Flop rate at the predicted time (on the CUDA-core roof: FMA-equivalent flops, 2 per instruction)."""
        work = 2 * self.op.instructions if self.roof.startswith("CUDA") else self.op.flops
        return work / self.seconds / 1e12


def classify(op: Op, ceilings: Ceilings) -> str:
    """``"memory"`` if the op's intensity is below the device's ops:byte ratio, else ``"compute"`` (with an fp32
    roof, CUDA-core ops compare their instruction intensity with that roof's ridge)."""
    if ceilings.fp32_tflops and not on_tensor_cores(op):
        return "memory" if op.slot_intensity < cuda_core_ops_per_byte(ceilings) else "compute"
    return "memory" if op.intensity < ops_per_byte(ceilings) else "compute"


def predict(op: Op, ceilings: Ceilings) -> Prediction:
    """The roofline's best possible time for ``op`` on a device with these ceilings, and what bounds it. With an
    fp32 roof (``ceilings.fp32_tflops``), ops off the tensor cores are timed by their instructions on it."""
    mem = op.bytes / (ceilings.gbps * 1e9)
    if ceilings.fp32_tflops and not on_tensor_cores(op):
        math = op.instructions / (ceilings.fp32_tflops * 1e12 / 2)
        return Prediction(op, max(mem, math), classify(op, ceilings), mem, math, roof="CUDA cores (fp32)")
    math = op.flops / (ceilings.tflops * 1e12)
    return Prediction(op, max(mem, math), classify(op, ceilings), mem, math)


def format_seconds(seconds: float) -> str:
    """A duration with three significant digits in the unit that keeps it readable: ``"41.3 µs"``, ``"1.06 ms"``,
    ``"38.2 ps"``. The roofline's bound for a tiny op is picoseconds, and a fixed ``µs`` with one decimal printed
    it as "0.0 µs"."""
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return f"{seconds} s"
    if seconds == 0:
        return "0 s"
    units = ((1e-15, "fs"), (1e-12, "ps"), (1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1, "s"))
    for scale, unit in units:  # the smallest unit in which the rounded value stays below 1000
        text = f"{seconds / scale:.3g}"
        if "e" not in text and abs(float(text)) < 1000:
            break
    else:
        text = f"{seconds:,.0f}"  # 1000 s and more
    if abs(seconds) < 1e-15:
        return f"{seconds:.3g} s"
    return f"{text} {unit}"


def format_count(value: float, unit: str) -> str:
    """A count with three significant digits and an SI prefix: ``format_count(17.18e9, "FLOP")`` is "17.2 GFLOP",
    ``format_count(128, "B")`` "128 B" (a tiny op printed as "0.000 GFLOP, 0.00 MB")."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale * 0.9995:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def table(ops, ceilings: Ceilings) -> str:
    """A text table: flops, bytes, intensity, bound and predicted time of each op on these ceilings."""
    two = bool(ceilings.fp32_tflops)
    head = (f"{'operation':<30} {'dtype':<9} {'GFLOP':>10} {'MB moved':>10} {'flop/B':>9}"
            + (f" {'roof':>13} {'on roof/B':>9}" if two else "") + f" {'bound':>8} {'best time':>11}")
    lines = [head, "-" * len(head)]
    for op in ops:
        p = predict(op, ceilings)
        roof = ""
        if two:
            cuda = p.roof.startswith("CUDA")
            on_roof = op.slot_intensity if cuda else op.intensity
            roof = f" {'CUDA cores' if cuda else 'tensor cores':>13} {on_roof:>9.2f}"
        lines.append(f"{op.name:<30} {op.dtype:<9} {op.flops / 1e9:>10.3f} {op.bytes / 1e6:>10.2f} "
                     f"{op.intensity:>9.2f}{roof} {p.bound:>8} {format_seconds(p.seconds):>11}")
    lines.append(f"ops:byte ratio {ops_per_byte(ceilings):.0f} flop/B ({ceilings.source})")
    if two:
        lines.append(f"CUDA-core fp32 roof {ceilings.fp32_tflops:,.1f} TFLOP/s: ratio "
                     f"{cuda_core_ops_per_byte(ceilings):.1f} "
                     "FMA-equivalent flop/B (2 per fp32 instruction)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# Plots.


def plot_roofline(points, ceilings: Ceilings, ax=None, title: str | None = None):
    """Draw the roofline for ``ceilings`` and the given points.

    ``points``: a list of dicts with ``op`` (an :class:`Op`) and optionally ``seconds`` (a measured time). Each op is
    drawn at its intensity: a hollow marker at the roofline's attainable rate, and, if measured, a filled marker at
    the achieved rate, each labelled with the op's name and its bound.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    own_figure = ax is None
    if own_figure:
        _, ax = plt.subplots(figsize=(7.5, 4.8))
    ridge = ops_per_byte(ceilings)
    ridge32 = cuda_core_ops_per_byte(ceilings)

    def x_of(op):
        return op.slot_intensity if ridge32 and not on_tensor_cores(op) else op.intensity

    xs = [x_of(p["op"]) for p in points] or [ridge]
    lo, hi = min(min(xs), ridge, ridge32 or ridge) / 4, max(max(xs), ridge) * 4
    ai = np.logspace(np.log10(lo), np.log10(hi), 200)
    roof = np.minimum(ceilings.tflops, ai * ceilings.gbps * 1e9 / 1e12)
    kind = "measured" if ceilings.measured else "datasheet"
    roofs = [(ai, roof)]
    ax.plot(ai, roof, color="black", lw=2, label=f"{ceilings.dtype} tensor cores ({kind}: {ceilings.gbps:,.0f} GB/s, "
                                                 f"{ceilings.tflops:,.0f} TFLOP/s)")
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.annotate(f"ops:byte = {ridge:.0f}", (ridge, ceilings.tflops), textcoords="offset points", xytext=(4, -14),
                color="gray", fontsize=8)
    if ridge32:
        roof32 = np.minimum(ceilings.fp32_tflops, ai * ceilings.gbps * 1e9 / 1e12)
        roofs.append((ai, roof32))
        ax.plot(ai, roof32, color="black", lw=1.5, ls="--",
                label=f"fp32 CUDA cores ({ceilings.fp32_tflops:,.0f} TFLOP/s; x: 2 x instructions / B)")
        ax.annotate(f"{ridge32:.0f}", (ridge32, ceilings.fp32_tflops), textcoords="offset points", xytext=(4, -12),
                    color="gray", fontsize=8)
    labels, ys = [], [lo * ceilings.gbps * 1e9 / 1e12, ceilings.tflops]
    for i, p in enumerate(points):
        op = p["op"]
        pred = predict(op, ceilings)
        color = f"C{i % 10}"
        x = x_of(op)
        ax.plot(x, pred.attainable_tflops, marker="o", mfc="none", color=color, ms=8)
        y = pred.attainable_tflops
        if p.get("seconds"):
            y = pred.attainable_tflops * pred.seconds / p["seconds"]
            ax.plot(x, y, marker="o", color=color, ms=7)
        ys += [y, pred.attainable_tflops]
        labels.append((x, y, f"{op.name} ({pred.bound})", color))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(ys) / 2, max(ys) * 3)  # headroom above the flat roof for the labels of compute-bound points
    ax.set_xlabel("arithmetic intensity (flop / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    if own_figure:
        ax.figure.tight_layout()
    plots.wrap_title(ax, title or f"roofline: hollow = predicted, filled = measured; ceilings: "
                                  f"{_short_source(ceilings.source)}")
    if own_figure:
        ax.figure.tight_layout()  # again, for the title's lines
    plots.place_labels(ax, labels, avoid=roofs)
    return ax


def plot_working_set(sizes_bytes, gbps, l2_bytes: int | None = None, ax=None, title: str | None = None):
    """Bandwidth against working-set size (log x), with the L2 size marked by a vertical line (lesson 03)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    ax.plot(sizes_bytes, gbps, marker="o")
    if l2_bytes:
        ax.axvline(l2_bytes, color="red", ls="--")
        ax.annotate(f"L2 = {l2_bytes / 2**20:.0f} MiB", (l2_bytes, max(g for g in gbps if g)),
                    textcoords="offset points", xytext=(4, -12), color="red", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("working set (bytes read + written)")
    ax.set_ylabel("GB/s")
    ax.set_title(title or "copy bandwidth vs working-set size")
    ax.grid(True, which="both", alpha=0.3)
    return ax


def _short_source(source: str) -> str:
    """``source`` without its parenthesised citations: the title keeps what the ceilings are, the printed text keeps
    where the figures come from."""
    out, depth = [], 0
    for ch in source:
        depth += ch == "("
        if depth == 0:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return " ".join("".join(out).split()).replace(" ;", ";").replace(" ,", ",")
