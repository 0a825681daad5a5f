"""Draw where a failed check's output is wrong, as Triton-Puzzles draws its puzzles: a strip for a 1-D output, a
heatmap for a 2-D one, the last two dimensions of the first wrong slice for a larger one. Each element is right,
a wrong value, or never written (it still holds the poison the checker filled the output with); writes past the
end of the output, into the guard band the checker put after it, are drawn past the last element.

The picture comes from the checker's own evidence, a :class:`compare.WhereMap` that ``check`` keeps on each failed
case (``CaseResult.where``), not from a trace of the kernel.

Why the checker's canaries and not triton-viz (a package that records every load and store of Triton's
interpreter and draws them): triton-viz sees Triton kernels only, and only while they run in the CPU interpreter,
where it adds a record per traced access to the interpreter's own NumPy work; it cannot watch a kernel on a GPU or a
CUDA C++ exercise at all; its viewer is a web server beside the notebook; and it would be one more dependency for
every learner. The checker's poison and guard bands answer "where is the output wrong" for every kind of exercise
(Triton, CUDA C++, torch), in CPU mode and on a GPU, at the cost the check already pays (one fill before the call,
one comparison after); the map reuses the comparison's own masks (well under a tenth of compare_values' time). What
they cannot say is *which program* wrote an element: the lesson's ``who_writes`` picture (a kernel that stores its
``program_id``) answers that, on any device.

matplotlib is imported only when something is drawn; figures are ``matplotlib.figure.Figure`` objects outside
pyplot, so nothing accumulates in pyplot's figure list (notebooks and nbval stay light).
"""
from __future__ import annotations

import torch

from . import compare
from .compare import NEVER, NONE, PAST, RIGHT, WRONG

WIDTH = 512  # cells per row of a wrapped 1-D strip (one element per cell up to compare.MAX_SIDE**2 elements)
MAX_ROWS, MAX_COLS = 256, 512  # drawn cells at most; more are pooled, a cell showing its worst element
MAX_FIGURES = 3  # figures one check call draws at most
MAX_CIRCLED = 12  # up to this many wrong cells in a large picture are circled as well

COLOURS = {NONE: "#ffffff", RIGHT: "#c7e9c0", WRONG: "#d62728", NEVER: "#404040", PAST: "#9467bd"}
NAMES = {RIGHT: "right", WRONG: "wrong value", NEVER: "never written", PAST: "written past the end"}


def _cells_1d(where: compare.WhereMap) -> tuple:
    """(2-D cells, elements per cell along (rows, columns), note): the map's strip with its writes past the end after
    the last element, wrapped into rows of WIDTH cells when longer than that."""
    b = where.block[0]
    n = where.shape[0] if where.shape else 1
    cells = where.codes
    if where.n_past:
        at = (n + where.past_end) // b  # the cell of each element written past the end
        ext = torch.full((int(at.max()) + 1,), NONE, dtype=torch.int8)
        ext[:cells.numel()] = cells
        ext[at] = PAST
        cells = ext
    total = cells.numel()
    if total <= WIDTH:
        return cells.view(1, total), (1, b), ""
    rows = -(-total // WIDTH)
    grid = torch.full((rows * WIDTH,), NONE, dtype=torch.int8)
    grid[:total] = cells
    return grid.view(rows, WIDTH), (WIDTH * b, b), f"wrapped into rows of {WIDTH * b:,} elements"


def _cells_2d(where: compare.WhereMap) -> tuple:
    """(2-D cells, elements per cell, note, rows of the output drawn): the map, and below its last row the rows that
    the writes past the end would fill (drawn when the map shows the output's last slice)."""
    rows, cols = where.shape[-2], where.shape[-1]
    br, bc = where.block
    cells = where.codes
    last_slice = not where.slice or all(i == s - 1 for i, s in zip(where.slice, where.shape[:-2]))
    note = ""
    if where.n_past and last_slice:
        row = rows + where.past_end // cols
        at_r, at_c = row // br, (where.past_end % cols) // bc
        grid = torch.full((int(at_r.max()) + 1, cells.shape[1]), NONE, dtype=torch.int8)
        grid[:cells.shape[0]] = cells
        grid[at_r, at_c] = PAST
        cells = grid
        note = "below the line: memory after the output's last element, in rows of its width"
    elif where.n_past:
        note = f"{where.n_past} element(s) written past the end of the last slice, not drawn here"
    return cells, (br, bc), note, rows


def draw(where: compare.WhereMap, exercise: str = "", case: str = ""):
    """The figure of ``where`` (a :class:`compare.WhereMap`): one colour per category, a legend naming each with its
    count, the title naming ``exercise`` and ``case``. Returns a ``matplotlib.figure.Figure``."""
    if not isinstance(where, compare.WhereMap):
        raise TypeError(f"draw(where): where must be a WhereMap (a failed case's CaseResult.where), "
                        f"got {type(where).__name__}")
    import textwrap

    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator, MultipleLocator, StrMethodFormatter

    one_d = len(where.shape) <= 1
    if one_d:
        cells, per_cell, note = _cells_1d(where)
        out_rows = None
    else:
        cells, per_cell, note, out_rows = _cells_2d(where)
    # Pool to what a figure can show: a wrong element must not vanish between pixels.
    shown = (compare.block_for(cells.shape[0], MAX_ROWS), compare.block_for(cells.shape[1], MAX_COLS))
    cells = compare.pool(cells, shown)
    per_cell = (per_cell[0] * shown[0], per_cell[1] * shown[1])  # elements (1-D: index steps) per cell, each axis
    # what one cell covers, in words: rows x columns of the output, or rows of the strip x elements
    span = (shown[0] if one_d else per_cell[0], per_cell[1])
    lut = np.array([[int(COLOURS[c][i:i + 2], 16) / 255 for i in (1, 3, 5)] for c in (NONE, RIGHT, WRONG, NEVER,
                                                                                      PAST)])
    rgb = lut[cells.numpy().astype(np.int64) - NONE]

    strip = one_d and cells.shape[0] == 1
    height = 2.1 if strip else min(4.5, 2.4 + 0.03 * cells.shape[0])
    fig = Figure(figsize=(8, height), layout="constrained")
    ax = fig.add_subplot()
    x_end = cells.shape[1] * per_cell[1]
    y_end = cells.shape[0] * per_cell[0]
    ax.imshow(rgb, interpolation="nearest", aspect="auto", extent=(0, x_end, y_end, 0))
    # A category with a few cells in a large picture gets them circled: one wrong element in a million is seen.
    for code in (WRONG, NEVER, PAST) if cells.numel() > 400 else ():
        at = (cells == code).nonzero()
        if 0 < at.shape[0] <= MAX_CIRCLED:
            ax.scatter((at[:, 1].numpy() + 0.5) * per_cell[1], (at[:, 0].numpy() + 0.5) * per_cell[0], s=160,
                       facecolors="none", edgecolors=COLOURS[code], linewidths=1.5, clip_on=False)
    ax.set_xlim(0, x_end)
    ax.set_ylim(y_end, 0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if one_d:
        ax.set_xlabel("element index" if strip else "element index within the row")
        if strip:
            ax.set_yticks([])
        else:  # ticks on rows' first elements, every power-of-two rows, at most 6; columns in eighths of a row
            ax.set_ylabel("index of the row's first element")
            ax.yaxis.set_major_locator(MultipleLocator(per_cell[0] * compare.block_for(cells.shape[0], 6)))
            ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
            ax.xaxis.set_major_locator(MultipleLocator(x_end // 8))
    else:
        ax.set_xlabel("column")
        ax.set_ylabel("row")
        if where.n_past and cells.shape[0] * per_cell[0] > out_rows:
            ax.axhline(out_rows, color="black", linewidth=1)

    counts = {RIGHT: where.n_right, WRONG: where.n_wrong, NEVER: where.n_never}
    if where.n_past:
        counts[PAST] = where.n_past
    handles = [Patch(facecolor=COLOURS[c], edgecolor="#888888", label=f"{NAMES[c]}: {n:,}") for c, n in counts.items()]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)

    what = [f"output of {_plural(_numel(where.shape), 'element')}" if one_d else
            f"output {'x'.join(map(str, where.shape))}"]
    if where.slice:
        which = "the first with a wrong element" if where.n_wrong + where.n_never else "the last"
        what.append(f"slice [{', '.join(map(str, where.slice))}, :, :], {which}")
    if note:
        what.append(note)
    if span != (1, 1):
        size = (_plural(span[1], "element") if span[0] == 1 else f"{span[0]} rows x {_plural(span[1], 'element')}") \
            if one_d else f"{span[0]:,}x{span[1]:,} elements"
        what.append(f"a cell is {size}, coloured by its worst")
    head = ", ".join(p for p in (exercise, f"case {case!r}" if case else "") if p)
    detail = textwrap.fill("; ".join(what), 110)
    ax.set_title(f"{head + ': ' if head else ''}where the output is wrong\n{detail}", fontsize=9)
    return fig


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def pick(cases: list, k: int = MAX_FIGURES) -> list:
    """Up to ``k`` of ``cases`` (failed CaseResults with a where map) to draw, in their order: those whose pictures
    show the most categories first (a map that is all one colour says no more than the text above it)."""
    def shown(c) -> int:
        w = c.where
        return sum(n > 0 for n in (w.n_right, w.n_wrong, w.n_never, w.n_past))
    chosen = sorted(range(len(cases)), key=lambda i: -shown(cases[i]))[:k]
    return [cases[i] for i in sorted(chosen)]


def show(figs: list) -> None:
    """Show ``figs`` in a notebook, as PNGs (nothing is kept: a figure is garbage once shown); outside a notebook,
    say how to draw them instead."""
    from .. import plots

    if plots.in_notebook():
        from IPython.display import Image, display

        for fig in figs:
            display(Image(data=plots.figure_png(fig)))
    elif figs:
        print("(the drawings of where the output is wrong show in a notebook; elsewhere save one with "
              "gpucourse.grading.drawing.draw(result.cases[k].where).savefig('where.png'))")
