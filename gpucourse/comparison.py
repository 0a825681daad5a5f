"""How several timings are shown: :class:`Comparison` (implementations of one operation side by side, with speedups
and a note where the spread can flip the ranking; HTML in notebooks, text elsewhere) and :class:`Sweep` (the same
across sizes, plotted). timing.py's compare() and sweep() time them."""
from __future__ import annotations

import dataclasses

from .bench_result import BenchResult, format_ms


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

