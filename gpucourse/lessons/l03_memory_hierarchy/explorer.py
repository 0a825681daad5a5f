"""The roofline explorer: pick an operation and its sizes, see its intensity, bound, predicted and measured time.

:func:`roofline_explorer` always prints the table and draws the plot for its default choice (the static path: what
CI, nbval and a read-only notebook viewer see). When ipywidgets and a live notebook frontend are available it also
shows controls that redraw the same view for other choices. Measuring needs a GPU; elsewhere only predictions show.
"""
from __future__ import annotations

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


def describe(op, ceilings, measured_seconds: float | None = None, unmeasured: str | None = None) -> str:
    """Text: the op's flops, bytes, intensity, bound and predicted time, and the measured time if given
    (``unmeasured``: why it was not measured, when a GPU was there)."""
    p = R.predict(op, ceilings)
    lines = [f"{op.name} ({op.dtype}): {op.flops / 1e9:,.3f} GFLOP, {op.bytes / 1e6:,.2f} MB moved, "
             f"intensity {op.intensity:,.2f} flop/B",
             (f"on CUDA cores: {op.instructions / 1e9:,.3f} G fp32 instructions, {op.slot_intensity:,.2f} "
              f"FMA-equivalent flop/B against a ridge of {R.cuda_core_ops_per_byte(ceilings):,.1f}"
              if p.roof.startswith("CUDA") else
              f"on tensor cores: device ops:byte ratio {R.ops_per_byte(ceilings):,.0f} flop/B")
             + f" -> {p.bound}-bound; predicted best time "
             f"{p.seconds * 1e6:,.1f} µs (memory {p.memory_seconds * 1e6:,.1f} µs, math {p.math_seconds * 1e6:,.1f} µs)",
             f"ceilings: {ceilings.source}"]
    if measured_seconds is not None:
        lines.append(f"measured: {measured_seconds * 1e6:,.1f} µs = {measured_seconds / p.seconds:.2f}x the "
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


def render(choice: dict, ceilings, measure=None, ax=None):
    """Print :func:`describe` for ``choice`` and draw it on the roofline. ``measure(op) -> seconds`` or None; a
    choice that would take too long or too much memory to measure (:func:`too_big`) is shown unmeasured."""
    op = make_op(choice)
    why = too_big(op, ceilings) if measure is not None else None
    secs = measure(op) if measure is not None and why is None else None
    print(describe(op, ceilings, secs, why))
    R.plot_roofline([{"op": op, "seconds": secs}], ceilings, ax=ax)
    return op, secs


def widgets_available() -> bool:
    """True when ipywidgets is installed and we run inside a Jupyter kernel (a frontend may render the controls)."""
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def roofline_explorer(ceilings, measure=None, choice: dict | None = None, interactive: bool | None = None):
    """Show the static view for ``choice`` (default: GEMM 8192x128x8192 bf16), then controls if widgets work."""
    import matplotlib.pyplot as plt

    choice = dict(DEFAULT if choice is None else choice)
    render(choice, ceilings, measure)
    plt.show()
    interactive = widgets_available() if interactive is None else interactive
    if not interactive:
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
    out = W.Output()

    def update(*_):
        for f, w in sizes.items():
            w.layout.display = "" if f in FIELDS[kind.value] else "none"
        c = {"kind": kind.value, "dtype": dtype.value, **{f: w.value for f, w in sizes.items()}}
        out.clear_output(wait=True)
        with out:
            try:
                render(c, ceilings, measure if do_measure.value else None)
                plt.show()
            except Exception as exc:  # e.g. out of GPU memory for a huge choice: say so, keep the explorer alive
                print(f"could not show this choice: {type(exc).__name__}: {exc}")

    for w in [kind, dtype, do_measure, *sizes.values()]:
        w.observe(update, names="value")
    box = W.VBox([W.HBox([kind, dtype, do_measure]), W.HBox(list(sizes.values())), out])
    display(box)
    update()
    return box
