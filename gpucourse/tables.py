"""Text tables for the notebooks: a cell gathers the numbers it measured, one row each, and hands the layout here.

    >>> print(table([("copy", 2_952.2, 0.98), ("add", 2_003.0, 0.66)], ["kernel", "GB/s", "of copy"],
    ...             formats=[None, ",.1f", "{:.0%}"]))
    kernel     GB/s  of copy
    copy    2,952.2      98%
    add     2,003.0      66%

Columns of text are aligned left, every other column right. A format is a spec for ``format(value, spec)``
(``",.1f"``), a template with one field (``"{:.2f}x"``, ``"{:.3f} ms"``), or a function. Without ``widths`` each
column is as wide as its widest entry and columns are two spaces apart; with ``widths`` each entry is padded to its
column's width as an f-string's ``{value:>12,}`` pads it, gap included, so an existing layout can be kept exactly.
"""
from __future__ import annotations

from typing import Callable, Sequence


def _formatter(spec) -> Callable[[object], str]:
    if spec is None:
        return str
    if callable(spec):
        return spec
    if "{" in spec:
        return spec.format
    return lambda v: format(v, spec)


def _per_column(what: str, given, columns: Sequence[str] | None, n: int) -> list:
    """``given`` as one entry per column: a list as it is, a dict keyed by header, or None for none."""
    if given is None:
        return [None] * n
    if isinstance(given, dict):
        if columns is None:
            raise ValueError(f"table: {what} given by header, but the table has no header")
        unknown = set(given) - set(columns)
        if unknown:
            raise ValueError(f"table: {what} for columns the table does not have: {sorted(unknown)}")
        return [given.get(c) for c in columns]
    given = list(given)
    if len(given) != n:
        raise ValueError(f"table: {len(given)} {what} for {n} columns")
    return given


def table(rows, columns: Sequence[str] | None = None, formats=None, widths=None, *, title: str | None = None,
          rule: str | None = None, sep: str | Sequence[str] | None = None, indent: str = "", missing: str = "-",
          align: str | None = None) -> str:
    """The rows as a text table, one line per row, under a header line of ``columns`` (none if None).

    rows: sequences of values, one per column; None is shown as ``missing``. A row that is a string is printed as
      it is, on its own line (a note about the row above), and takes no part in the widths.
    formats: one per column (a list, or a dict by header): a format spec, a ``"{...}"`` template or a function;
      None shows the value with ``str``.
    widths: one per column (a list, or a dict by header): the width each entry is padded to, as in an f-string;
      None sizes that column to its widest entry. sep: what joins the columns, one string or one per gap; by
      default "" when widths are given (the widths hold the gaps), two spaces otherwise.
    title: a line above the header. rule: a character; a line of it under the header, as wide as the table.
    indent: put before every line of the table (not the title). align: one "<" or ">" per column, to override
      the default: left for a column of text, right for the others (numbers, or nothing but None).
    Lines carry no trailing blanks."""
    rows = list(rows)
    data = [r for r in rows if not isinstance(r, str)]
    n = len(columns) if columns is not None else max((len(r) for r in data), default=0)
    for r in data:
        if len(r) != n:
            raise ValueError(f"table: a row of {len(r)} values for {n} columns: {r!r}")
    fmts = [_formatter(f) for f in _per_column("formats", formats, columns, n)]
    cells = [[missing if v is None else fmt(v) for v, fmt in zip(r, fmts)] for r in data]
    if align is None:
        values = [[r[i] for r in data if r[i] is not None] for i in range(n)]
        align = "".join("<" if v and all(isinstance(x, str) for x in v) else ">" for v in values)
    elif len(align) != n or set(align) - set("<>"):
        raise ValueError(f"table: align needs one '<' or '>' per column ({n}), got {align!r}")
    fixed = _per_column("widths", widths, columns, n)
    width = [w if w is not None else max([len(c[i]) for c in cells] + [len(columns[i]) if columns else 0])
             for i, w in enumerate(fixed)]
    if sep is None:
        sep = "" if widths is not None else "  "
    gaps = [sep] * max(n - 1, 0) if isinstance(sep, str) else list(sep)
    if len(gaps) != max(n - 1, 0):
        raise ValueError(f"table: {len(gaps)} separators for {n} columns")

    def line(entries) -> str:
        padded = [e.ljust(w) if a == "<" else e.rjust(w) for e, w, a in zip(entries, width, align)]
        return (indent + "".join(g + e for g, e in zip([""] + gaps, padded))).rstrip()

    out = [title] if title is not None else []
    if columns is not None:
        out.append(line(columns))
        if rule:
            out.append(indent + rule * (sum(width) + sum(map(len, gaps))))
    it = iter(cells)
    out += [r if isinstance(r, str) else line(next(it)) for r in rows]
    return "\n".join(out)
