"""Honest timing: bench() for one function, compare() for several, sweep() across sizes, interleaved() for
several timed in turns over a few rounds.

On a GPU, bench() hands the timing to ``triton.testing.do_bench``: one untimed call (compilation, allocation), a
short estimate, a warm-up, then many repeats each bracketed by CUDA events, with the L2 cache flushed (outside the
timed region) before each repeat so every run reads from device memory. bench() adds what do_bench does not: a
minimum number of repeats for slow kernels, the CPU path (a host timer), declared bytes and flops, and warnings.
Where do_bench cannot serve (``flush_l2=False``, which it does not offer, or no Triton), :func:`event_times` times the
repeats the same way. :func:`graph_repeat` captures many calls of a tiny kernel in one CUDA graph.
Throughput is derived from the bytes and flops you *declare*, so a notebook can never get the units wrong, and a
result above the device's datasheet peak is flagged as a measurement error rather than shown as a win.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Callable

from . import device, dtypes, specs

OVER_PEAK_TOLERANCE = 1.02  # datasheet figures are rounded; 2% over is still "impossible" beyond that
_flush_buffer = None


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


def _peaks(dtype) -> tuple:
    spec = specs.current()
    if spec is None:
        return None, None
    if dtype is None:  # no dtype declared: only the highest rate of any dtype is a hard ceiling
        flops = max(v for v in spec.tflops.values() if v)
    else:
        flops = spec.peak_tflops(str(dtype))
    return spec.bandwidth_gbs, flops


def _l2_flush_buffer():
    global _flush_buffer
    if _flush_buffer is None:
        import torch

        p = device.props()
        nbytes = max(256 * 1024 * 1024, 2 * (p.l2_bytes if p else 0))
        _flush_buffer = torch.empty(nbytes, dtype=torch.int8, device="cuda")
    return _flush_buffer


def event_times(fn: Callable[[], object], reps: int = 10, warmup: int = 1, before: Callable | None = None,
                lead_sleep_cycles: int = 0, wait_each: bool = True) -> list:
    """ms of each of ``reps`` calls of ``fn`` on the GPU, each bracketed by its own CUDA events, after ``warmup``
    untimed calls. No L2 flush unless ``before`` does one (it runs before each start event, untimed).

    ``wait_each``: wait for each call before queuing the next (the host's own gaps then fall between repeats, never
    inside one); ``False`` queues all repeats at once, as do_bench does.
    ``lead_sleep_cycles``: queue a GPU sleep of that many cycles before each start event. A kernel of a few
    microseconds is shorter than its own launch: without work queued ahead of it the events also time the GPU
    waiting for the launch. The sleep keeps the GPU busy while the CPU queues the call, and touches no memory (L2
    stays as it was)."""
    import torch

    for _ in range(max(warmup, 0)):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if before is not None:
            before()
        if lead_sleep_cycles:
            torch.cuda._sleep(lead_sleep_cycles)
        starts[i].record()
        fn()
        ends[i].record()
        if wait_each:
            ends[i].synchronize()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _do_bench():
    """``triton.testing.do_bench`` if this Triton has it with ``return_mode="all"`` (Triton 3.x), else None."""
    try:
        import inspect

        import triton.testing
    except ImportError:
        return None
    fn = getattr(triton.testing, "do_bench", None)
    if fn is None or "return_mode" not in inspect.signature(fn).parameters:
        return None
    return fn


def _gpu_samples(fn: Callable[[], object], warmup_ms: float, rep_ms: float, flush_l2: bool | str, min_reps: int,
                 max_reps: int) -> list:
    import torch

    do_bench = _do_bench() if flush_l2 and flush_l2 != "read" else None
    samples = None
    if do_bench is not None:
        try:
            samples = list(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all"))
        except AssertionError:  # a Triton 3.x whose do_bench has return_mode but not "all"
            samples = None
    if samples:
        if len(samples) < min_reps:  # do_bench sizes its run by the window: a slow kernel gets few repeats
            more_ms = (min_reps - len(samples)) * statistics.median(samples) * 1.1
            samples += list(do_bench(fn, warmup=0, rep=more_ms, return_mode="all"))
        return samples[:max_reps]
    # A read flush, no flush (do_bench always flushes, by writing) or no Triton: the same protocol through
    # event_times.
    if flush_l2 == "read":
        buf = _l2_flush_buffer()
        flush = lambda: buf.sum(dtype=torch.int32)  # noqa: E731  (reads every byte, leaves L2's lines clean)
    else:
        flush = _l2_flush_buffer().zero_ if flush_l2 else None
    fn()  # compile, allocate, autotune: never timed
    estimate = max(statistics.mean(event_times(fn, reps=5, warmup=0, before=flush, wait_each=False)), 1e-4)
    if flush is not None:  # each repeat also runs the flush: count it, as do_bench does, or a short kernel gets
        estimate += statistics.median(event_times(flush, reps=3, warmup=1))  # thousands of repeats
    n_warmup = max(1, int(warmup_ms / estimate))
    n_rep = min(max_reps, max(min_reps, int(rep_ms / estimate)))
    torch.cuda.synchronize()
    return event_times(fn, reps=n_rep, warmup=n_warmup, before=flush, wait_each=False)


def graph_repeat(fn: Callable[[], object], reps: int, fallback: bool = True) -> Callable[[], object]:
    """One callable that runs ``fn`` ``reps`` times. On a GPU the calls are captured in one CUDA graph, so small
    kernels run back to back without the CPU's launch gaps between them. ``fn`` is run once on a side stream first
    (as PyTorch's docs prescribe before a capture). Where a graph cannot be captured (CPU mode, an old driver),
    ``fallback`` gives a plain loop, gaps and all; ``fallback=False`` raises instead."""
    if device.on_gpu():
        import torch

        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(reps):
                    fn()
            return graph.replay
        except Exception:
            if not fallback:
                raise
            torch.cuda.synchronize()

    def loop():
        for _ in range(reps):
            fn()
    return loop


def _cpu_samples(fn: Callable[[], object], warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int) -> list:
    t0 = time.perf_counter()
    fn()
    first = (time.perf_counter() - t0) * 1e3
    deadline = time.perf_counter() + min(warmup_ms, 10 * first) / 1e3
    while time.perf_counter() < deadline:
        fn()
    samples = []
    t_end = time.perf_counter() + rep_ms / 1e3
    while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def host_ms(fn: Callable[[], object], rep_ms: float = 30, min_reps: int = 5) -> float:
    """Median ms of ``fn()`` on the host clock (for work that runs on the CPU, in either mode)."""
    return statistics.median(_cpu_samples(fn, warmup_ms=5, rep_ms=rep_ms, min_reps=min_reps, max_reps=10_000))


def settle(fn: Callable[[], object], seconds: float = 2.0) -> None:
    """Run ``fn`` repeatedly for ``seconds`` so GPU clocks and power reach steady state before a measurement.

    A compute-bound loop starts at boost clocks the GPU cannot hold: on the H100 used for the course's results the
    first second of bf16 8192³ matmuls ran about 6% faster than the rest (1.47 ms vs 1.57 ms each).
    """
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for _ in range(10):
            fn()
        if device.on_gpu():
            import torch

            torch.cuda.synchronize()


def bench(fn: Callable, *args, bytes: float | None = None, flops: float | None = None, dtype=None,
          name: str | None = None, warmup_ms: float = 25, rep_ms: float = 100, flush_l2: bool | str = True,
          min_reps: int = 10, max_reps: int = 100_000, **kwargs) -> BenchResult:
    """Time ``fn(*args, **kwargs)`` and return a :class:`BenchResult` (median, spread, GB/s, TFLOP/s, % of peak).

    ``bytes``: bytes the operation must move through memory (each input read once, each output written once);
    ``flops``: floating-point operations it does; ``dtype``: which tensor-core peak ``flops`` is compared with.
    ``warmup_ms``/``rep_ms``: how long to warm up and to measure (as in ``triton.testing.do_bench``).
    ``flush_l2``: on a GPU, evict L2 before each repeat so inputs come from device memory. ``True`` flushes as
    ``do_bench`` does, by writing zeros over a buffer larger than L2; L2 is then full of dirty lines, which a kernel
    that reads more than L2 holds pays to write back while it runs (on the course's H100 about 10 µs: a 134 MB
    bf16 GEMV took 60 µs after such a flush and 50 µs after a read, ``lab/results/h100-explore-quant-flush.json``).
    ``"read"`` flushes by reading the buffer instead, which leaves L2 holding clean lines, as a model's next layer
    finds it; use it for short memory-bound kernels. ``False``: no flush.

    Compute-bound kernels on a power-capped GPU: clocks wander over longer than the default 100 ms window, so two
    calls can differ by a few percent (on the course's H100, bf16 8192³ matmul medians varied with a CV of 3.5%, as
    do_bench's did). Call :func:`settle` first and pass ``rep_ms=500`` for stable figures (CV 0.5% there); see
    ``benchmarks/results/h100.json``, entry ``timing_agreement``.
    """
    if args or kwargs:
        call = lambda: fn(*args, **kwargs)  # noqa: E731
    else:
        call = fn
    on_gpu = device.on_gpu()
    if on_gpu:
        samples = _gpu_samples(call, warmup_ms, rep_ms, flush_l2, min_reps, max_reps)
        peak_gbs, peak_tflops = _peaks(dtype)
    else:
        samples = _cpu_samples(call, warmup_ms, rep_ms, min_reps, max_reps)
        peak_gbs = peak_tflops = None
    result = BenchResult(name=name or getattr(fn, "__name__", "fn"), samples=samples, mode="gpu" if on_gpu else "cpu",
                         bytes=bytes, flops=flops, dtype=None if dtype is None else dtypes.torch_name(dtype),
                         flush_l2=flush_l2, peak_gbs=peak_gbs, peak_tflops=peak_tflops)
    result.warnings.extend(peak_check(result))
    if on_gpu and result.median_ms < 0.005:
        result.warnings.append("The run takes under 5 µs: launch overhead dominates; time a larger problem "
                               "or a batch of calls.")
    return result


@dataclasses.dataclass
class Rounds:
    """One function's :func:`bench` results over several rounds (see :func:`interleaved`)."""

    results: list  # one BenchResult per round

    @property
    def medians_ms(self) -> list:
        return [r.median_ms for r in self.results]

    @property
    def median_ms(self) -> float:
        """The median of the rounds' medians."""
        return statistics.median(self.medians_ms)

    @property
    def typical(self) -> BenchResult:
        """The round whose median is nearest :attr:`median_ms`: its GB/s, TFLOP/s and warnings stand for all."""
        return min(self.results, key=lambda r: abs(r.median_ms - self.median_ms))


def interleaved(fns: dict, rounds: int = 3, **bench_kwargs) -> dict:
    """Time each ``name -> fn`` of ``fns`` in turns: ``rounds`` rounds, each calling :func:`bench` once per
    function, so that clock drift over the whole run hits every function alike. Returns ``name -> Rounds``;
    ``.median_ms`` is the median of the rounds' medians and ``.typical`` the round nearest it. Keyword arguments
    (``bytes``, ``flops``, ``dtype``, ``rep_ms``, ...) go to :func:`bench`; call :func:`settle` first for
    compute-bound kernels."""
    runs = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            runs[name].append(bench(fn, name=name, **bench_kwargs))
    return {name: Rounds(results) for name, results in runs.items()}


def copy_gbps(nbytes: int, **bench_kwargs) -> float:
    """Measured copy bandwidth (GB/s, bytes read + written) for a buffer of ``nbytes``: the memory ceiling that
    memory-bound kernels are compared with. A torch copy of one buffer into another, timed by :func:`bench`."""
    import torch

    src = torch.empty(int(nbytes), dtype=torch.uint8, device=device.torch_device())
    dst = torch.empty_like(src)
    return bench(dst.copy_, src, bytes=2 * src.numel(), name="copy", **bench_kwargs).gbps


# ---------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Comparison:
    """Several implementations of one operation, timed the same way. Renders as HTML in notebooks, text elsewhere."""

    results: list
    baseline: str

    def speedup(self, name: str) -> float:
        base = self[self.baseline].median_ms
        return base / self[name].median_ms

    def __getitem__(self, name: str) -> BenchResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def rows(self) -> list:
        rows = []
        for r in self.results:
            row = {"implementation": r.name, "median": format_ms(r.median_ms), "IQR": format_ms(r.iqr_ms)}
            if r.gbps is not None:
                row["GB/s"] = f"{r.gbps:,.1f}"
            if r.tflops is not None:
                row["TFLOP/s"] = f"{r.tflops:,.2f}"
            pct = r.pct_of_peak_bw if r.pct_of_peak_bw is not None else r.pct_of_peak_flops
            if pct is not None:
                row["% of peak"] = f"{pct:.0f}%"
            row[f"speedup vs {self.baseline}"] = f"{self.speedup(r.name):.2f}×"
            row["note"] = "measurement error?" if r.suspicious else ""
            rows.append(row)
        return rows

    def noise_notes(self) -> list:
        """Sentences that say when the spread of the timings can change the ranking: a result whose IQR is more
        than half its median (a busy machine, a timer too coarse for the work), or two results whose middle halves
        (25th to 75th percentile) overlap, so their order may flip from run to run."""
        notes = []
        for r in self.results:
            if r.median_ms > 0 and r.iqr_ms > 0.5 * r.median_ms:
                notes.append(f"noisy: {r.name}'s spread (IQR {format_ms(r.iqr_ms)}) is {r.iqr_ms / r.median_ms:.1f}x "
                             f"its median; the ranking may not hold (run it again, or time a bigger problem)")
        ranked = sorted(self.results, key=lambda r: r.median_ms)
        for a, b in zip(ranked, ranked[1:]):
            if b.q25_ms <= a.q75_ms:
                notes.append(f"{a.name} and {b.name} are within each other's spread: a tie, not a ranking")
        return notes

    def _columns(self) -> list:
        cols = []
        for row in self.rows():
            cols += [c for c in row if c not in cols]
        return cols

    def __str__(self) -> str:
        rows, cols = self.rows(), self._columns()
        widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
        lines = ["  ".join(c.ljust(widths[c]) for c in cols), "  ".join("-" * widths[c] for c in cols)]
        lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols) for r in rows]
        mode = self.results[0].mode if self.results else "?"
        lines.append(f"({mode} mode; medians of many runs)")
        lines += [f"note: {n}" for n in self.noise_notes()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        rows, cols = self.rows(), self._columns()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>"
                       for r in rows)
        mode = self.results[0].mode if self.results else "?"
        notes = "".join(f"<br><small>note: {html.escape(n)}</small>" for n in self.noise_notes())
        return (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><small>{mode} mode</small>"
                f"{notes}")

    __repr__ = __str__


def compare(impls: dict, *args, baseline: str | None = None, **bench_kwargs) -> Comparison:
    """Time each ``name -> fn`` in ``impls`` on the same arguments; speedups are relative to ``baseline``
    (default: the first). Keyword arguments (``bytes``, ``flops``, ``dtype``, ...) go to :func:`bench`."""
    if not impls:
        raise ValueError("compare() needs at least one implementation.")
    results = [bench(fn, *args, name=name, **bench_kwargs) for name, fn in impls.items()]
    baseline = baseline or next(iter(impls))
    if baseline not in impls:
        raise KeyError(f"baseline {baseline!r} is not one of {list(impls)}")
    return Comparison(results=results, baseline=baseline)


@dataclasses.dataclass
class Sweep:
    sizes: list
    results: dict  # name -> list[BenchResult]

    def series(self, name: str, y: str = "ms") -> list:
        attr = {"ms": "median_ms", "gbps": "gbps", "tflops": "tflops"}[y]
        return [getattr(r, attr) for r in self.results[name]]

    def plot(self, y: str = "ms", ax=None, title: str | None = None, xlabel: str = "size"):
        from .plots import plot_sweep

        return plot_sweep(self, y=y, ax=ax, title=title, xlabel=xlabel)


def sweep(impls: dict, sizes, make_args: Callable, bytes: Callable | None = None, flops: Callable | None = None,
          plot: str | None = "ms", progress: bool = True, **bench_kwargs) -> Sweep:
    """Time every implementation at every size. ``make_args(size)`` returns the argument tuple; ``bytes(size)`` and
    ``flops(size)`` declare the work. Plots ``plot`` ("ms", "gbps" or "tflops"; None for no plot)."""
    sizes = list(sizes)
    results = {name: [] for name in impls}
    for i, n in enumerate(sizes):
        args = make_args(n)
        args = args if isinstance(args, tuple) else (args,)
        for name, fn in impls.items():
            results[name].append(bench(fn, *args, name=name, bytes=bytes(n) if bytes else None,
                                       flops=flops(n) if flops else None, **bench_kwargs))
        if progress:
            print(f"\rsweep: {i + 1}/{len(sizes)} sizes", end="", flush=True)
    if progress:
        print()
    result = Sweep(sizes=sizes, results=results)
    if plot:
        result.plot(y=plot)
    return result
