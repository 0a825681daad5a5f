"""The roofline explorer: pick an operation and its sizes, see its intensity, bound, predicted and measured time.

:func:`roofline_explorer` shows the description and the plot for its default choice, once. In a Jupyter kernel with
ipywidgets it shows them under controls that redraw the view for other choices, and the output it leaves in the
notebook carries the same first view as a static fallback (what a notebook viewer without the widgets' state
shows); elsewhere it prints and plots. Measuring needs a GPU; elsewhere only predictions show.
"""
from __future__ import annotations

from gpucourse import plots
from gpucourse import roofline as R

FIELDS = {"elementwise": ("n", "inputs"), "reduction": ("rows", "cols"), "gemv": ("M", "K"), "gemm": ("M", "N", "K")}
DEFAULT = {"kind": "gemm", "dtype": "bfloat16", "M": 8192, "N": 128, "K": 8192}
_POW2 = [2**k for k in range(4, 31)]


def make_op(choice: dict):
    """An Op from a choice such as ``{"kind": "gemm", "M": 8192, "N": 128, "K": 8192, "dtype": "bfloat16"}``."""
    kind = choice["kind"]
    if kind not in FIELDS:
        raise ValueError(f"kind must be one of {sorted(FIELDS)}, not {kind!r}")
    d = {"kind": kind, "dtype": choice.get("dtype", "float32")}
    for f in FIELDS[kind]:
        d[f] = int(choice.get(f, 1 if f == "inputs" else 4096))
    if kind == "elementwise":
        d["flops_per_element"] = 1
        name = "relu" if d["inputs"] == 1 else "add"
        return R.from_dict(d, name=f"{name} n={d['n']}")
    return R.from_dict(d)


TINY_S = 1e-6  # a predicted time below this is far under what launching a kernel costs


def describe(op, ceilings, measured_seconds: float | None = None, unmeasured: str | None = None) -> str:
    """Text: the op's flops, bytes, intensity, bound and predicted time, and the measured time if given
    (``unmeasured``: why it was not measured, when a GPU was there)."""
    p = R.predict(op, ceilings)
    lines = [f"{op.name} ({op.dtype}): {R.format_count(op.flops, 'FLOP')}, {R.format_count(op.bytes, 'B')} moved, "
             f"intensity {op.intensity:,.2f} flop/B",
             (f"on CUDA cores: {R.format_count(op.instructions, '')} fp32 instructions, {op.slot_intensity:,.2f} "
              f"FMA-equivalent flop/B against a ridge of {R.cuda_core_ops_per_byte(ceilings):,.1f}"
              if p.roof.startswith("CUDA") else
              f"on tensor cores: device ops:byte ratio {R.ops_per_byte(ceilings):,.0f} flop/B")
             + f" -> {p.bound}-bound; predicted best time "
             f"{R.format_seconds(p.seconds)} (memory {R.format_seconds(p.memory_seconds)}, "
             f"math {R.format_seconds(p.math_seconds)})",
             f"ceilings: {ceilings.source}"]
    if p.seconds < TINY_S:
        lines.append("under a microsecond: at this size the fixed cost of launching a kernel (lesson 02 measures it), "
                     "not the roofline, sets the time")
    if measured_seconds is not None:
        lines.append(f"measured: {R.format_seconds(measured_seconds)} = {measured_seconds / p.seconds:.2f}x the "
                     f"prediction ({op.flops / measured_seconds / 1e12:,.2f} TFLOP/s, "
                     f"{op.bytes / measured_seconds / 1e9:,.0f} GB/s)")
    else:
        lines.append(f"measured: - ({unmeasured or 'measuring needs a CUDA GPU'})")
    return "\n".join(lines)


MAX_PREDICTED_S = 0.05  # measure only choices the roofline says take under 50 ms per call ...
MAX_MEMORY_FRACTION = 0.25  # ... and whose tensors fit in a quarter of the free GPU memory


def too_big(op, ceilings) -> str | None:
    """Why measuring ``op`` here would take too long or too much memory (None if it is fine). Measuring repeats the
    op for a warm-up, a settling second and a 100 ms window: a 1-second GEMM would hold the cell for minutes."""
    p = R.predict(op, ceilings)
    if p.seconds > MAX_PREDICTED_S:
        return (f"the roofline predicts {p.seconds * 1e3:,.0f} ms per call (the explorer measures up to "
                f"{MAX_PREDICTED_S * 1e3:.0f} ms)")
    try:
        import torch

        free = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None
    except Exception:
        free = None
    if free is not None and op.bytes > MAX_MEMORY_FRACTION * free:
        return (f"its tensors take {op.bytes / 2**30:,.1f} GiB, over a quarter of the "
                f"{free / 2**30:,.0f} GiB free")
    return None


def render(choice: dict, ceilings, measure=None, ax=None, show: bool = True, unmeasured: str | None = None):
    """Print (``show``; else return in the tuple) :func:`describe` for ``choice`` and draw it on the roofline.
    ``measure(op) -> seconds`` or None (``unmeasured``: why not, where a GPU is there); a choice that would take
    too long or too much memory to measure (:func:`too_big`) is shown unmeasured. Returns ``(op, seconds, text,
    ax)``."""
    op = make_op(choice)
    why = too_big(op, ceilings) if measure is not None else unmeasured
    secs = measure(op) if measure is not None and why is None else None
    text = describe(op, ceilings, secs, why)
    if show:
        print(text)
    ax = R.plot_roofline([{"op": op, "seconds": secs}], ceilings, ax=ax)
    return op, secs, text, ax


def view(choice: dict, ceilings, measure=None, unmeasured: str | None = None) -> tuple:
    """``(text, png)``: :func:`describe`'s text and the roofline plot as PNG bytes, the figure closed (nothing is
    displayed: the widgets show these, and the notebook's saved output keeps the first view as its fallback)."""
    import matplotlib.pyplot as plt


    _, _, text, ax = render(choice, ceilings, measure, show=False, unmeasured=unmeasured)
    try:
        return text, plots.figure_png(ax.figure)
    finally:
        plt.close(ax.figure)


UNTICKED = "tick 'measure on this GPU' above to time it here"  # a GPU is there, the box is not ticked

FALLBACK_NOTE = ("(a static view of the roofline explorer; run the cell in a live notebook for its controls)")


def roofline_explorer(ceilings, measure=None, choice: dict | None = None, interactive: bool | None = None):
    """The explorer for ``choice`` (default: GEMM 8192x128x8192 bf16).

    Without widgets (``interactive=False``, or no Jupyter kernel: a script, a plain Python test) it prints the description and shows the plot. With them it displays controls above the same view, drawn once: the
    text in an HTML widget and the plot in an Image widget whose values each change replaces. The output a notebook
    saves carries that first view as its ``text/plain`` and ``image/png``, which a viewer without the widgets'
    state (a notebook not yet run or not trusted, GitHub) shows instead of the widget's ``VBox(children=...)`` repr.

    The widgets hold the view as values rather than capturing a plot in an ``Output`` widget: cleared and
    recaptured on every change, that one went blank after some changes made in a browser.
    """
    import matplotlib.pyplot as plt

    choice = dict(DEFAULT if choice is None else choice)
    interactive = plots.in_notebook(widgets=True) if interactive is None else interactive
    if not interactive:
        render(choice, ceilings, measure)
        plt.show()
        return None

    import ipywidgets as W
    from IPython.display import display

    kind = W.Dropdown(options=list(FIELDS), value=choice["kind"], description="op")
    dtype = W.Dropdown(options=["float32", "float16", "bfloat16"], value=choice.get("dtype", "bfloat16"),
                       description="dtype")
    sizes = {f: W.Dropdown(options=_POW2, value=int(choice.get(f, 4096)), description=f)
             for f in ("n", "rows", "cols", "M", "N", "K")}
    sizes["inputs"] = W.Dropdown(options=[1, 2], value=int(choice.get("inputs", 1)), description="inputs")
    do_measure = W.Checkbox(value=False, description="measure on this GPU", disabled=measure is None)
    text, plot, show = plots.text_and_image_view()
    plot.add_class("gpucourse-roofline-plot")

    def current() -> dict:
        return {"kind": kind.value, "dtype": dtype.value, **{f: w.value for f, w in sizes.items()}}

    def update(*_):
        for f, w in sizes.items():
            w.layout.display = "" if f in FIELDS[kind.value] else "none"
        try:
            ticked = measure is not None and do_measure.value
            show(*view(current(), ceilings, measure if ticked else None,
                       UNTICKED if measure is not None and not ticked else None))
        except Exception as exc:  # e.g. out of GPU memory for a huge choice: say so, keep the explorer alive
            show(f"could not show this choice: {type(exc).__name__}: {exc}", None)

    first_text, first_png = view(current(), ceilings, None, UNTICKED if measure is not None else None)
    for w in [kind, dtype, do_measure, *sizes.values()]:
        w.observe(update, names="value")
    for f, w in sizes.items():
        w.layout.display = "" if f in FIELDS[kind.value] else "none"
    show(first_text, first_png)
    box = W.VBox([W.HBox([kind, dtype, do_measure]), W.HBox(list(sizes.values())), text, plot])
    box.add_class("gpucourse-roofline-explorer")
    bundle = plots.fallback_bundle(box, first_text, first_png, FALLBACK_NOTE)
    display(bundle, raw=True)
    return box


