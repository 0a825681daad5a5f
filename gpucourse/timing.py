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

This module runs the timings; what a result holds and the peak checks are in bench_result.py, the CUDA-event timer,
the L2 flush and graph_repeat in gpu_events.py, and how a comparison or a sweep is shown in comparison.py. Every
public name of those is re-exported here: ``gpucourse.timing`` stays the one import for notebooks and lessons.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable

from . import device, dtypes
from .bench_result import OVER_PEAK_TOLERANCE, BenchResult, device_peaks, format_ms, gbps, peak_check, tflops
from .comparison import Comparison, Sweep
from .gpu_events import event_times, graph_repeat, l2_flush_buffer

__all__ = ["OVER_PEAK_TOLERANCE", "BenchResult", "Comparison", "Rounds", "Sweep", "bench", "compare", "copy_gbps",
           "event_times", "format_ms", "gbps", "graph_repeat", "host_ms", "interleaved", "peak_check", "settle",
           "sweep", "tflops"]

_l2_flush_buffer = l2_flush_buffer  # the name lesson 03's onchip.py imports


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
        buf = l2_flush_buffer()
        flush = lambda: buf.sum(dtype=torch.int32)  # noqa: E731  (reads every byte, leaves L2's lines clean)
    else:
        flush = l2_flush_buffer().zero_ if flush_l2 else None
    fn()  # compile, allocate, autotune: never timed
    estimate = max(statistics.mean(event_times(fn, reps=5, warmup=0, before=flush, wait_each=False)), 1e-4)
    if flush is not None:  # each repeat also runs the flush: count it, as do_bench does, or a short kernel gets
        estimate += statistics.median(event_times(flush, reps=3, warmup=1))  # thousands of repeats
    n_warmup = max(1, int(warmup_ms / estimate))
    n_rep = min(max_reps, max(min_reps, int(rep_ms / estimate)))
    torch.cuda.synchronize()
    return event_times(fn, reps=n_rep, warmup=n_warmup, before=flush, wait_each=False)


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
        peak_gbs, peak_tflops = device_peaks(dtype)
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
