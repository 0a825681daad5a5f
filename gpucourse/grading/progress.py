"""Where a batch is: a line on stderr per finished submission and a bar on a terminal (:class:`Progress`), and, with
$GPUCOURSE_GRADE_TRACE set, a JSON line per event of each submission (:func:`trace`, read by
benchmarks/grading_throughput.py)."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .report import Result


# Where each submission's time goes, for benchmarks/grading_throughput.py: with $GPUCOURSE_GRADE_TRACE set (in the
# grader's environment; workers never see it), one JSON line per event is appended to that file.
TRACE_ENV = "GPUCOURSE_GRADE_TRACE"
_trace_lock = threading.Lock()


def trace(submission: str, event: str, **fields) -> None:
    """Append ``{"t", "submission", "event", **fields}`` to $GPUCOURSE_GRADE_TRACE (nothing when it is unset)."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    line = json.dumps({"t": round(time.monotonic(), 4), "submission": submission, "event": event, **fields})
    with _trace_lock, open(path, "a") as f:
        f.write(line + "\n")


class Progress:
    """Progress on stderr as submissions finish (the text report on stdout stays parseable).

    In a log (stderr not a terminal): one line per submission, ``[3/12] alice.py  passed    1.00  (4.2 s)``, with
    the start of the message when it did not pass. On a terminal: the same lines, and under them a bar redrawn in
    place (``[#####.......] 3/12 done, 32 s, about 1 min left``), its clock ticking each second while submissions
    run, cleared when the batch ends. Paths are shown with
    control characters escaped (a file name could carry a terminal escape sequence)."""

    WIDTH = 30

    def __init__(self, total: int, enabled: bool, stream=None):
        self.total, self.done, self.enabled, self.lock = total, 0, enabled, threading.Lock()
        self.closed = False
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and _isatty(self.stream)
        self.t0 = time.monotonic()
        if self.tty and total:
            self.stream.write(self.bar())
            self.stream.flush()
            # the bar's clock ticks while a long submission runs (a class's batch is minutes), until the last one
            threading.Thread(target=self._tick, daemon=True).start()

    TICK_S = 1.0

    def _tick(self) -> None:
        while True:
            time.sleep(self.TICK_S)
            with self.lock:
                if self.done >= self.total or self.closed:
                    return
                self.stream.write("\r\033[K" + self.bar())
                self.stream.flush()

    def close(self) -> None:
        """Stop the clock (the batch is over, or ended early); the last line was written by update()."""
        with self.lock:
            self.closed = True

    def bar(self) -> str:
        filled = self.WIDTH * self.done // max(1, self.total)
        elapsed = time.monotonic() - self.t0
        text = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} done, {elapsed:.0f} s"
        if 0 < self.done < self.total:
            left = elapsed / self.done * (self.total - self.done)
            text += f", about {left:.0f} s left" if left < 90 else f", about {left / 60:.0f} min left"
        elif self.done == 0:
            text = f"grading {self.total} submission{'s' if self.total != 1 else ''}... " + text
        return text

    def update(self, r: Result) -> None:
        from .safe_text import printable

        with self.lock:
            self.done += 1
            if not self.enabled:
                return
            why = ""
            if r.status != "passed":
                why = "  " + printable(r.message if len(r.message) <= 120 else r.message[:117] + "...")
            line = (f"[{self.done:>{len(str(self.total))}}/{self.total}] {printable(r.submission)}  {r.status:<8} "
                    f"{r.score:.2f}  ({r.seconds:.1f} s){why}")
            if self.tty:  # the line replaces the bar, and the bar is drawn again under it until the last one
                self.stream.write("\r\033[K" + line + "\n" + (self.bar() if self.done < self.total else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
