"""Progress of long loops: ``for size in progress(sizes, "copy sweep"): ...``.

A sweep that ends within :data:`QUIET_S` (2 s) shows nothing: whether to show is decided after the fact, when an
item finishes later than that. After it:

* in a Jupyter notebook with a frontend: an ipywidgets bar updated in place, which the loop's end replaces with one
  line of text (what it did, in how long), so the saved notebook holds no widget that nothing drives any more;
* everywhere else (a script, a log, a pipe, a child process, nbval, ``nbconvert --execute``... any run under
  pytest): a plain line on stderr each time another tenth of the items is done (or every :data:`EVERY_S` seconds
  without a known total), and one at the end. stderr, so a child process's last lines say where it stopped and a
  result printed on stdout is not interleaved with them.

``GPUCOURSE_PROGRESS`` = ``widget``, ``lines`` or ``off`` overrides the choice (for a log that wants no progress at
all, or a frontend this module does not recognize).
"""
from __future__ import annotations

import os
import sys
import time

from .plots import in_notebook

QUIET_S = 2.0  # a loop that finishes within this shows nothing
EVERY_S = 5.0  # without a total, a line at most this often
STEPS = 10  # with a total, a line each time another 1/STEPS of it is done
MODES = ("widget", "lines", "off")


def _under_pytest() -> bool:
    # nbval runs a notebook's kernel under pytest (which exports PYTEST_VERSION to the processes it starts): nothing
    # renders widgets there, and a log reads lines.
    return "PYTEST_VERSION" in os.environ or "PYTEST_CURRENT_TEST" in os.environ


def mode() -> str:
    """How progress shows here: ``GPUCOURSE_PROGRESS`` if set, else "widget" in a notebook with a frontend (a
    Jupyter kernel not run by pytest) and "lines" elsewhere."""
    given = os.environ.get("GPUCOURSE_PROGRESS", "").strip().lower()
    if given:
        if given not in MODES:
            raise ValueError(f"GPUCOURSE_PROGRESS must be one of {MODES}, not {given!r}")
        return given
    return "widget" if in_notebook(widgets=True) and not _under_pytest() else "lines"


def _fmt_s(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def _count(done: int, total: int | None) -> str:
    return f"{done}/{total} ({done / total:.0%})" if total else f"{done}"


class _Lines:
    def __init__(self, desc: str, total: int | None, out):
        self.desc, self.total, self.out = desc, total, out
        self.last_step, self.last_t = -1, None

    def update(self, done: int, elapsed: float, last: str = "") -> None:
        if self.total:
            step = done * STEPS // self.total
            if step == self.last_step or done == self.total:  # the end has its own line
                return
            self.last_step = step
        elif self.last_t is not None and elapsed - self.last_t < EVERY_S:
            return
        self.last_t = elapsed
        print(f"{self.desc}: {_count(done, self.total)} done after {_fmt_s(elapsed)}{last}",
              file=self.out or sys.stderr, flush=True)

    def finish(self, done: int, elapsed: float, complete: bool) -> None:
        how = "done in" if complete else "stopped after"
        print(f"{self.desc}: {_count(done, self.total)} {how} {_fmt_s(elapsed)}", file=self.out or sys.stderr,
              flush=True)


class _Bar:
    def __init__(self, desc: str, total: int | None):
        import ipywidgets as W
        from IPython.display import display

        self.desc, self.total = desc, total
        self.bar = W.IntProgress(value=0, min=0, max=total or 1, description=desc,
                                 bar_style="info", layout=W.Layout(width="60%"),
                                 style={"description_width": "initial"})
        if not total:  # an unknown total: the bar stays full and the label counts
            self.bar.value = 1
        self.label = W.Label()
        self.box = W.HBox([self.bar, self.label])
        self.handle = display(self.box, display_id=True)

    def update(self, done: int, elapsed: float, last: str = "") -> None:
        if self.total:
            self.bar.value = min(done, self.total)
        self.label.value = f"{_count(done, self.total)}, {_fmt_s(elapsed)}{last}"

    def finish(self, done: int, elapsed: float, complete: bool) -> None:
        how = "done in" if complete else "stopped after"
        self.handle.update({"text/plain": f"{self.desc}: {_count(done, self.total)} {how} {_fmt_s(elapsed)}"},
                           raw=True)
        for w in (self.box, self.bar, self.label):  # the widgets and the layout and style models they made
            for part in (w, w.layout, getattr(w, "style", None)):
                if part is not None:
                    part.close()


def progress(iterable, desc: str, total: int | None = None, *, label=None, clock=time.monotonic, out=None,
             show: str | None = None):
    """Yield the items of ``iterable``, showing progress once the loop has run longer than :data:`QUIET_S`.

    ``desc``: what the loop does ("GEMV peers", "copy sweep"); ``total``: the number of items (default:
    ``len(iterable)`` where it has one; without one the count shows without a percentage). ``label(item)``: a name
    for the item just done, shown after the count (so a log that stops says what ran last). ``clock``: the time source
    (tests pass a fake one); ``out``: where lines go (default stderr); ``show``: "widget", "lines" or "off" (default:
    :func:`mode`). A loop left early (``break``, an exception) says where it stopped if it showed anything.
    """
    if not isinstance(desc, str) or not desc:
        raise ValueError(f"desc must be a non-empty string saying what the loop does, not {desc!r}")
    if total is None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    elif isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"total must be a non-negative integer or None, not {total!r}")
    show = show or mode()
    if show not in MODES:
        raise ValueError(f"show must be one of {MODES}, not {show!r}")
    return _run(iterable, desc, total, label, clock, out, show)


def _run(iterable, desc, total, label, clock, out, show):
    start = clock()
    view, done, complete, elapsed = None, 0, False, 0.0
    try:
        for item in iterable:
            yield item
            done += 1
            elapsed = clock() - start
            if show == "off":
                continue
            if view is None and elapsed > QUIET_S:
                view = _Bar(desc, total) if show == "widget" else _Lines(desc, total, out)
            if view is not None:
                view.update(done, elapsed, f" (last: {label(item)})" if label else "")
        complete = True
    finally:
        if view is not None:  # the end of a finished loop is its last item's end; a loop left early ends now
            view.finish(done, elapsed if complete else clock() - start, complete)
