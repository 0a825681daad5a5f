"""Matplotlib helpers shared by the lessons: throughput or time against size."""
from __future__ import annotations

_YLABEL = {"ms": "time (ms, median)", "gbps": "throughput (GB/s)", "tflops": "throughput (TFLOP/s)"}


def plot_sweep(sweep, y: str = "ms", ax=None, title: str | None = None, xlabel: str = "size", ceiling=None):
    """Plot a :class:`gpucourse.timing.Sweep`: one line per implementation, log-log for time, log-x otherwise.

    ``ceiling``: optional ``(value, label)`` drawn as a horizontal dashed line (e.g. measured copy bandwidth).
    """
    import matplotlib.pyplot as plt

    if y not in _YLABEL:
        raise ValueError(f"y must be one of {list(_YLABEL)}, not {y!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4))
    for name in sweep.results:
        values = sweep.series(name, y)
        if any(v is None for v in values):
            raise ValueError(f"y={y!r} needs declared {'bytes' if y == 'gbps' else 'flops'} in sweep()")
        ax.plot(sweep.sizes, values, marker="o", label=name)
    ax.set_xscale("log", base=2)
    if y == "ms":
        ax.set_yscale("log")
    if ceiling is not None:
        value, label = ceiling
        ax.axhline(value, linestyle="--", color="gray")
        ax.annotate(label, (sweep.sizes[0], value), textcoords="offset points", xytext=(0, 4), color="gray")
    mode = next(iter(sweep.results.values()))[0].mode if sweep.results else ""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(_YLABEL[y])
    ax.set_title(title or f"{_YLABEL[y].split(' (')[0]} vs {xlabel} ({mode} mode)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return ax
