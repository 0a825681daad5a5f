"""The CPU/GPU timeline of a piece of code, from ``torch.profiler``: two lanes and the GPU's idle fraction.

The CPU lane holds what the host did (top-level torch ops, CUDA runtime calls such as ``cudaLaunchKernel`` and the
waits of ``cudaStreamSynchronize``/``cudaMemcpy``); the GPU lane holds kernels and copies as the device ran them.
A well-fed GPU has a full GPU lane; every synchronization shows as a gap. ``idle_fraction`` is the share of the
profiled window in which the GPU ran nothing. In CPU mode there is no GPU lane: the figure says so.
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings

# CUDA runtime calls that may hold the host until the GPU is done (the red "waiting for the GPU" bars), by exact
# name: the synchronizes, and the copies. cudaMemcpyAsync is among them although it can return at once (pinned memory,
# non_blocking=True): to or from pageable memory it returns only when the copy is done (except a small host-to-device
# copy, which the driver stages and returns: lesson 02 measures up to what size), which is how the final copy of
# results to the host waits for the whole queue, and the profile does not say which memory a copy used. (On the H100,
# the fixed loop's non_blocking copies show as red slivers of ~10-35 us; the waits last milliseconds.) Not
# cudaStreamWaitEvent: a stream waits for an event on the GPU, the host goes on.
HOST_WAITS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                        "cudaMemcpyAsync"})


@dataclasses.dataclass
class Timeline:
    """Intervals in microseconds from the start of the profile: ``(start, end, name)`` tuples."""

    cpu: list
    gpu: list
    has_gpu: bool

    @property
    def window(self) -> tuple:
        ends = [e for _, e, _ in self.cpu + self.gpu]
        starts = [s for s, _, _ in self.cpu + self.gpu]
        return (min(starts), max(ends)) if starts else (0.0, 0.0)

    def idle_fraction(self) -> float | None:
        """Share of the window with no GPU work (None without a GPU lane)."""
        if not self.has_gpu:
            return None
        return idle_fraction(self.gpu, *self.window)

    def gpu_busy_us(self) -> float:
        return busy_time(self.gpu)


def merge(intervals) -> list:
    """Union of ``(start, end, ...)`` intervals as sorted, non-overlapping ``(start, end)`` pairs."""
    out = []
    for s, e, *_ in sorted(intervals):
        if e < s:
            raise ValueError(f"interval ends before it starts: ({s}, {e})")
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def busy_time(intervals, start: float | None = None, end: float | None = None) -> float:
    """Time covered by at least one interval, clipped to ``[start, end]`` when given."""
    total = 0.0
    for s, e in merge(intervals):
        if start is not None:
            s = max(s, start)
        if end is not None:
            e = min(e, end)
        total += max(0.0, e - s)
    return total


def idle_fraction(intervals, start: float, end: float) -> float:
    """Share of ``[start, end]`` covered by no interval (1.0 for an empty lane, 0.0 for a full one)."""
    if end <= start:
        raise ValueError("idle_fraction needs end > start")
    return 1.0 - busy_time(intervals, start, end) / (end - start)


def from_events(events, has_gpu: bool) -> Timeline:
    """Build a Timeline from profiler events (``prof.events()``: objects with ``name``, ``time_range.start/end`` in
    µs, ``device_type`` and ``cpu_parent``). CPU lane: top-level host events and CUDA runtime calls; GPU lane:
    device events (kernels, memcpy, memset)."""
    cpu, gpu = [], []
    for ev in events:
        kind = str(getattr(ev, "device_type", "CPU")).split(".")[-1].upper()
        s, e, name = float(ev.time_range.start), float(ev.time_range.end), str(ev.name)
        if kind == "CPU":
            if getattr(ev, "cpu_parent", None) is None or name.startswith("cuda"):
                cpu.append((s, e, name))
        else:
            gpu.append((s, e, name))
    t0 = min([s for s, _, _ in cpu + gpu], default=0.0)
    shift = lambda xs: sorted((s - t0, e - t0, n) for s, e, n in xs)  # noqa: E731
    return Timeline(cpu=shift(cpu), gpu=shift(gpu), has_gpu=has_gpu)


def profile(fn, *args, warmup: int = 1, **kwargs) -> Timeline:
    """Run ``fn(*args, **kwargs)`` ``warmup`` times untraced, then once under ``torch.profiler``; its Timeline."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as _profile

    from . import device

    on_gpu = device.on_gpu()
    for _ in range(warmup):
        fn(*args, **kwargs)
    if on_gpu:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with quiet_profiler(), _profile(activities=activities) as prof:
        fn(*args, **kwargs)
        if on_gpu:
            torch.cuda.synchronize()
    return from_events(prof.events(), has_gpu=on_gpu)


@contextlib.contextmanager
def quiet_profiler():
    """A context in which torch.profiler's note that it "clears events at the end of each cycle" is not printed:
    the course profiles one cycle and reads it at once, so the note (printed to stderr in a notebook) only puzzles."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
        yield


def _color(name: str, lane: str) -> str:
    if lane == "cpu":
        return "tab:red" if name in HOST_WAITS else "tab:gray"
    return "tab:orange" if name.lower().startswith(("memcpy", "memset")) else "tab:blue"


def draw(tl: Timeline, ax=None, title: str = ""):
    """Two lanes: CPU (gray: work and launches, red: waiting for the GPU) and GPU (blue: kernels, orange: copies)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.8))
    for y, lane, items in ((1, "cpu", tl.cpu), (0, "gpu", tl.gpu)):
        for s, e, name in items:
            ax.broken_barh([(s / 1e3, max(e - s, 0.05) / 1e3)], (y - 0.35, 0.7), color=_color(name, lane))
    lo, hi = tl.window
    if not tl.has_gpu:
        ax.text((lo + hi) / 2e3, 0, "no GPU lane in CPU mode", ha="center", va="center", color="gray")
    ax.set_yticks([0, 1], ["GPU", "CPU"])
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlim(lo / 1e3, hi / 1e3 if hi > lo else lo / 1e3 + 1)
    ax.set_xlabel("time (ms)")
    idle = tl.idle_fraction()
    ax.set_title(title + (f" — GPU idle {100 * idle:.0f}% of the time" if idle is not None else ""))
    return ax
