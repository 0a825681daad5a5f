"""The tiles-and-waves model of a GEMM, in plain Python (no GPU needed).

A tiled matmul cuts the M×N output into tile_m×tile_n tiles, one program (thread block) each. With one program per
SM at a time (true of large tensor-core tiles, whose operand buffers fill shared memory), the GPU runs the tiles in
*waves* of ``num_sms``. Two kinds of waste follow:

* tile quantization: a dimension that is not a multiple of the tile leaves edge tiles partly empty, yet they cost a
  whole tile;
* wave quantization: a tile count that is not a multiple of the SM count leaves the last wave partly empty, yet it
  takes as long as a full one.

The model's time is ``ceil(tiles / num_sms)`` waves, each as long as one tile's work on one SM. It predicts *where*
the time jumps as N grows (when the wave count goes up), and the lesson compares that with a fixed-tile kernel's
measured sweep.
"""
from __future__ import annotations

import math

from gpucourse import plots


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def gemm_waves(M: int, N: int, tile_m: int, tile_n: int, num_sms: int) -> dict:
    """Tiles, waves and the last wave's occupancy of an M×N output cut into tile_m×tile_n tiles on ``num_sms`` SMs.

    ``tiles`` = ceil(M/tile_m) * ceil(N/tile_n); ``waves`` = tiles / num_sms (a fraction: 3.9 means three full waves
    and one 90 % full); ``last_wave_occupancy`` = the fraction of the SMs busy in the last wave (1.0 when the tiles
    fill every wave)."""
    for name, v in (("M", M), ("N", N), ("tile_m", tile_m), ("tile_n", tile_n), ("num_sms", num_sms)):
        _positive_int(name, v)
    tiles = math.ceil(M / tile_m) * math.ceil(N / tile_n)
    last = tiles - (math.ceil(tiles / num_sms) - 1) * num_sms
    return {"tiles": tiles, "waves": tiles / num_sms, "last_wave_occupancy": last / num_sms}


def full_waves(M: int, N: int, tile_m: int, tile_n: int, num_sms: int) -> int:
    """Waves the GPU actually runs: ceil(tiles / num_sms)."""
    return math.ceil(gemm_waves(M, N, tile_m, tile_n, num_sms)["tiles"] / num_sms)


def predicted_ms(M: int, N: int, K: int, tile_m: int, tile_n: int, num_sms: int, tile_tflops: float) -> float:
    """The model's time in ms: full waves × one tile's time, where one tile (2·tile_m·tile_n·K flops) runs at
    ``tile_tflops`` TFLOP/s on one SM (that is, the whole GPU at ``tile_tflops * num_sms`` with every SM busy)."""
    _positive_int("K", K)
    if not tile_tflops > 0:
        raise ValueError(f"tile_tflops must be positive, got {tile_tflops!r}")
    tile_ms = 2.0 * tile_m * tile_n * K / (tile_tflops * 1e12) * 1e3
    return full_waves(M, N, tile_m, tile_n, num_sms) * tile_ms


def efficiency(M: int, N: int, tile_m: int, tile_n: int, num_sms: int) -> float:
    """Useful work / work paid for: (M·N) / (full waves × num_sms × tile_m·tile_n). 1.0 means no quantization."""
    return M * N / (full_waves(M, N, tile_m, tile_n, num_sms) * num_sms * tile_m * tile_n)


def wave_steps(M: int, ns, tile_m: int, tile_n: int, num_sms: int) -> list:
    """The values of ``ns`` (in increasing order) at which the wave count goes up from the previous value."""
    ns = sorted(ns)
    out = []
    for prev, n in zip(ns, ns[1:]):
        if full_waves(M, n, tile_m, tile_n, num_sms) > full_waves(M, prev, tile_m, tile_n, num_sms):
            out.append(n)
    return out


def choose_tile(M: int, N: int, K: int, tiles: dict, num_sms: int) -> tuple:
    """The (tile_m, tile_n) of ``tiles`` (a dict ``(tile_m, tile_n) -> TFLOP/s one SM reaches with that tile``) with
    the smallest :func:`predicted_ms`; ties go to the first in ``tiles``' order."""
    if not tiles:
        raise ValueError("tiles is empty: give at least one (tile_m, tile_n) -> TFLOP/s per SM")
    return min(tiles, key=lambda t: predicted_ms(M, N, K, t[0], t[1], num_sms, tiles[t]))


def explain(M: int, N: int, K: int, tile_m: int, tile_n: int, num_sms: int, tile_tflops: float | None = None) -> str:
    """A few lines on one GEMM shape: tiles, waves, last wave, wasted work, and (with ``tile_tflops``) the time."""
    w = gemm_waves(M, N, tile_m, tile_n, num_sms)
    lines = [f"{M}×{N} output in {tile_m}×{tile_n} tiles: {math.ceil(M / tile_m)} × {math.ceil(N / tile_n)} = "
             f"{w['tiles']} tiles",
             f"on {num_sms} SMs: {w['waves']:.2f} waves -> {full_waves(M, N, tile_m, tile_n, num_sms)} run, the last "
             f"{w['last_wave_occupancy']:.0%} full",
             f"useful share of the work paid for: {efficiency(M, N, tile_m, tile_n, num_sms):.1%}"]
    if tile_tflops:
        ms = predicted_ms(M, N, K, tile_m, tile_n, num_sms, tile_tflops)
        lines.append(f"predicted: {ms:.3f} ms = {2 * M * N * K / (ms * 1e-3) / 1e12:,.0f} TFLOP/s useful (K={K}, "
                     f"{tile_tflops:g} TFLOP/s per SM)")
    return "\n".join(lines)


def staircase(ax, M: int, N: int, K: int, tile_m: int, tile_n: int, num_sms: int, tile_tflops: float):
    """Draw on ``ax`` the wave model's predicted time against N (from N/2 to 2N, in steps of 16) beside the time
    without quantization, the chosen N marked."""
    ns = list(range(max(16, N // 2), 2 * N + 1, 16))
    ax.plot(ns, [predicted_ms(M, n, K, tile_m, tile_n, num_sms, tile_tflops) for n in ns], label="wave model")
    ax.plot(ns, [2 * M * n * K / (tile_tflops * num_sms * 1e12) * 1e3 for n in ns], "--", label="no quantization")
    ax.axvline(N, color="gray", alpha=0.5)
    ax.set_xlabel("N")
    ax.set_ylabel("predicted time (ms)")
    ax.set_title(f"M={M}, K={K}, {tile_m}x{tile_n} tiles, {num_sms} SMs", fontsize=10)
    ax.legend()
    return ax


def staircase_png(M: int, N: int, K: int, tile_m: int, tile_n: int, num_sms: int, tile_tflops: float) -> bytes:
    """:func:`staircase` as PNG bytes, its figure closed (nothing is displayed)."""
    import matplotlib.pyplot as plt


    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    try:
        staircase(ax, M, N, K, tile_m, tile_n, num_sms, tile_tflops)
        return plots.figure_png(fig)
    finally:
        plt.close(fig)


FALLBACK_NOTE = "(a static view of the wave explorer; run the cell in a live notebook for its controls)"
SM_CHOICES = [("T4: 40", 40), ("L4: 58", 58), ("A100: 108", 108), ("H100 SXM: 132", 132), ("H100 PCIe: 114", 114)]
TILES = [32, 64, 128, 256]


def explorer(M: int = 8192, N: int = 2048, K: int = 8192, tile_m: int = 128, tile_n: int = 256,
             num_sms: int = 132, tile_tflops: float = 5.0, interactive: bool | None = None):
    """:func:`explain` for a GEMM shape with the N sweep's staircase for the chosen tile, shown once.

    In a Jupyter kernel with ipywidgets (``interactive=None`` asks :func:`gpucourse.plots.in_notebook`) it displays
    controls above the view: the text in an HTML widget and the plot in an Image widget whose values each change
    replaces (nothing is printed or plotted outside the widget, so the view is never drawn twice). The output the
    notebook saves carries the first view as ``text/plain`` and ``image/png`` beside the widget's view, which a
    viewer without the widgets' state (a notebook not yet run, GitHub) shows instead of the widget's raw text.
    Returns the widget. Elsewhere (``interactive=False``, a script, no ipywidgets) it prints the text, shows the
    plot and returns None."""
    import matplotlib.pyplot as plt


    args = dict(M=M, N=N, K=K, tile_m=tile_m, tile_n=tile_n, num_sms=num_sms, tile_tflops=tile_tflops)
    text = explain(**args)  # checks the arguments before any widget is built
    interactive = plots.in_notebook(widgets=True) if interactive is None else interactive
    if interactive:
        try:
            import ipywidgets as W
        except ImportError:
            print("ipywidgets is not installed: the explorer's view for the given values instead.\n")
            interactive = False
    if not interactive:
        print(text)
        _, ax = plt.subplots(figsize=(6.4, 3.2))
        staircase(ax, **args)
        plt.show()
        return None

    from IPython.display import display

    if tile_m not in TILES or tile_n not in TILES:
        raise ValueError(f"the explorer's tiles are {TILES}; got tile_m={tile_m}, tile_n={tile_n}")
    sms = SM_CHOICES if num_sms in [v for _, v in SM_CHOICES] else [*SM_CHOICES, (str(num_sms), num_sms)]
    ints = dict(continuous_update=False)
    controls = {"M": W.IntText(M, description="M"), "N": W.IntSlider(N, 16, max(16384, N), 16, description="N", **ints),
                "K": W.IntText(K, description="K"),
                "tile_m": W.Dropdown(options=TILES, value=tile_m, description="tile_m"),
                "tile_n": W.Dropdown(options=TILES, value=tile_n, description="tile_n"),
                "num_sms": W.Dropdown(options=sms, value=num_sms, description="SMs"),
                "tile_tflops": W.FloatText(tile_tflops, description="TFLOP/s/SM")}
    words, plot, show = plots.text_and_image_view()

    def update(*_):
        now = {k: w.value for k, w in controls.items()}
        try:
            show(explain(**now), staircase_png(**now))
        except ValueError as exc:  # a zero or negative size typed in: say so, keep the explorer alive
            show(f"cannot show this choice: {exc}", None)

    first_png = staircase_png(**args)
    for w in controls.values():
        w.observe(update, names="value")
    show(text, first_png)
    c = list(controls.values())
    box = W.VBox([W.HBox(c[:3]), W.HBox(c[3:]), words, plot])
    box.add_class("gpucourse-wave-explorer")
    display(plots.fallback_bundle(box, text, first_png, FALLBACK_NOTE), raw=True)
    return box


