"""Matplotlib helpers shared by the lessons (throughput or time against size, labels, PNGs), and what a notebook's
widgets need: whether this is a notebook at all, and a widget view with a static fallback."""
from __future__ import annotations

import sys

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


def place_labels(ax, items, fontsize: float = 8, pad: float = 2.0, avoid=()) -> list:
    """Label points without labels overlapping each other, the points or the axes' edges.

    ``items``: ``(x, y, text, color)`` in data coordinates. The axes' limits must be final. Each label tries places
    around its point (right, then left, above and below, then further away in steps of a line) and takes the first
    that is inside the axes and clear of every label placed before it and of every point; when none is, it takes
    the place that overlaps least. ``avoid``: lines to keep labels off, each ``(xs, ys)`` in data coordinates. Several points sharing a ceiling (a roofline's compute-bound GEMMs) used to print
    their names on top of one another. Returns the Annotation objects.
    """
    from matplotlib.text import Text

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    scale = fig.dpi / 72  # points -> pixels
    marker_r = 4.5 * scale  # the roofline's markers: 8 points across
    dots = [ax.transData.transform((x, y)) for x, y, _, _ in items]
    import numpy as np

    # what is already written in the axes (the legend, annotations such as a ridge's value) is in the way too
    placed, out = [], []
    for t in [*ax.texts, *([ax.get_legend()] if ax.get_legend() else [])]:
        e = t.get_window_extent(renderer)
        placed.append((e.x0, e.y0, e.x1, e.y1))

    lines = []  # points along each line to avoid, about every 2 pixels, in display coordinates
    for xs, ys in avoid:
        d = ax.transData.transform(np.column_stack([xs, ys]))
        for a, b in zip(d[:-1], d[1:]):
            n = max(1, int(np.hypot(*(b - a)) / 2))
            lines.extend(a + (b - a) * t for t in np.linspace(0, 1, n, endpoint=False))
    lines = np.array(lines).reshape(-1, 2)
    line = (fontsize + 2) * scale
    offsets = []  # (dx, dy) in points, nearest first: right and left of the point, above and below, a line further
    for k in range(7):
        for dy in (3 + k * (fontsize + 2), -3 - fontsize - k * (fontsize + 2)):
            offsets += [(6, dy, k), (-6, dy, k)]

    def overlap(a, b) -> float:
        w = min(a[2], b[2]) - max(a[0], b[0])
        h = min(a[3], b[3]) - max(a[1], b[1])
        return w * h if w > 0 and h > 0 else 0.0

    order = sorted(range(len(items)), key=lambda i: (-dots[i][1], dots[i][0]))  # top to bottom, left to right
    for i in order:
        x, y, text, color = items[i]
        best = None
        for dx, dy, k in offsets:
            lead = dict(arrowstyle="-", color=color, lw=0.6, alpha=0.7) if k else None  # a label moved away: a line
            ann = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize,
                              color=color, ha="left" if dx > 0 else "right", va="bottom", arrowprops=lead)
            ann.update_positions(renderer)
            e = Text.get_window_extent(ann, renderer)  # the text alone: a leader line starts at its point
            r = (e.x0 - pad, e.y0 - pad, e.x1 + pad, e.y1 + pad)
            outside = max(0.0, box.x0 - r[0]) + max(0.0, r[2] - box.x1) + max(0.0, box.y0 - r[1]) \
                + max(0.0, r[3] - box.y1)
            cost = outside * line * 10 + sum(overlap(r, q) for q in placed)
            if len(lines):
                inside = (lines[:, 0] > r[0]) & (lines[:, 0] < r[2]) & (lines[:, 1] > r[1]) & (lines[:, 1] < r[3])
                cost += 4 * line * int(inside.sum())
            cost += sum(overlap(r, (px - marker_r, py - marker_r, px + marker_r, py + marker_r))
                        for j, (px, py) in enumerate(dots) if j != i)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, ann, r)
            else:
                ann.remove()
            if cost == 0:
                break
        placed.append(best[2])
        out.append(best[1])
    return out


def wrap_title(ax, text: str, fontsize: float = 9) -> None:
    """Set ``text`` as the title, wrapped at word boundaries to the axes' width (a long title was cut mid-word)."""
    import textwrap

    fig = ax.figure
    width_pt = ax.get_window_extent(fig.canvas.get_renderer()).width * 72 / fig.dpi
    chars = max(20, int(width_pt / (0.55 * fontsize)))
    ax.set_title("\n".join(textwrap.wrap(text, chars)), fontsize=fontsize)


def figure_png(fig, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (for an ipywidgets Image, or a display bundle's ``image/png``)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def fallback_bundle(widget, text: str, png: bytes, note: str) -> dict:
    """The display data for ``widget`` with a static fallback beside its view: ``text/plain`` (``text`` and ``note``,
    which says the view is static) and ``image/png``, for a frontend that cannot show the widget (JupyterLab before
    the cell runs, a rendered notebook on GitHub)."""
    import base64

    data = widget._repr_mimebundle_()
    data = dict(data[0] if isinstance(data, tuple) else data)
    data["text/plain"] = f"{text}\n{note}"
    data["image/png"] = base64.b64encode(png).decode("ascii")
    return data


def text_and_image_view():
    """``(words, image, show)``: an HTML widget for a text and an Image widget for a plot, and ``show(text, png)``
    that replaces both values (``png`` None hides the image). An explorer redraws by replacing values, never by
    clearing an Output widget (which left blank plots in a live notebook)."""
    import html

    import ipywidgets as W

    words = W.HTML()
    image = W.Image(format="png", layout=W.Layout(align_self="flex-start", max_width="100%"))  # its own size

    def show(text: str, png: bytes | None) -> None:
        words.value = f"<pre style='margin: 0; white-space: pre-wrap'>{html.escape(text)}</pre>"
        if png is not None:
            image.value = png
        image.layout.display = "" if png is not None else "none"

    return words, image, show


def in_notebook(widgets: bool = False) -> bool:
    """True inside a Jupyter (IPython) kernel, where a frontend shows what is displayed; with ``widgets``, only if
    ipywidgets can be imported too. IPython is not imported here: a script that never loaded it is not a notebook."""
    ip = sys.modules.get("IPython")
    try:
        shell = ip.get_ipython() if ip is not None else None
    except Exception:
        return False
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    if widgets:
        try:
            import ipywidgets  # noqa: F401
        except ImportError:
            return False
    return True
