"""gpucourse.progress: silent for fast loops, plain lines on stderr in logs, an ipywidgets bar in a notebook that the
loop's end replaces with one line of text. A fake clock stands in for time: each tick is one item's duration."""
from __future__ import annotations

import io

import pytest

from gpucourse import progress as P


def clock(step_s: float):
    """A fake clock that advances ``step_s`` seconds each time it is read (once at the start, once per item)."""
    t = [-step_s]

    def now():
        t[0] += step_s
        return t[0]

    return now


def run(items, step_s, **kw):
    out = io.StringIO()
    got = list(P.progress(items, kw.pop("desc", "sweep"), clock=clock(step_s), out=out, **kw))
    return got, out.getvalue().splitlines()


def test_a_loop_that_ends_within_two_seconds_shows_nothing():
    got, lines = run(range(19), 0.1, show="lines")  # 1.9 s in all
    assert got == list(range(19)) and lines == []


def test_plain_lines_each_tenth_of_a_known_total_and_one_at_the_end():
    got, lines = run(range(20), 0.5, show="lines")  # 10 s: shows from the fifth item (2.5 s) on
    assert got == list(range(20))
    assert lines[0] == "sweep: 5/20 (25%) done after 2.5 s"
    assert lines[-1] == "sweep: 20/20 (100%) done in 10.0 s"
    tenths = [int(line.split("/")[0].split()[-1]) for line in lines[:-1]]
    assert tenths == [5, 6, 8, 10, 12, 14, 16, 18], "a line as each further tenth is reached, not per item"


def test_total_comes_from_len_or_is_given():
    _, lines = run([10, 20, 30, 40], 1.0, show="lines")
    assert lines[-1] == "sweep: 4/4 (100%) done in 4.0 s"
    _, lines = run((x for x in range(4)), 1.0, show="lines", total=4)
    assert lines[-1] == "sweep: 4/4 (100%) done in 4.0 s"


def test_without_a_total_a_line_every_few_seconds_counts_items():
    _, lines = run((x for x in range(30)), 1.0, show="lines")  # no len(): counts, no percentages
    assert lines[0] == "sweep: 3 done after 3.0 s"
    assert lines[1] == "sweep: 8 done after 8.0 s", f"at most one line per {P.EVERY_S:g} s"
    assert lines[-1] == "sweep: 30 done in 30.0 s" and "%" not in "".join(lines)


def test_a_loop_left_early_says_where_it_stopped():
    out = io.StringIO()
    for i in P.progress(range(10), "configs", clock=clock(1.0), out=out, show="lines"):
        if i == 6:
            break
    assert out.getvalue().splitlines()[-1] == "configs: 6/10 (60%) stopped after 7.0 s"
    out = io.StringIO()
    with pytest.raises(RuntimeError, match="out of memory"):
        for i in P.progress(range(10), "shapes", clock=clock(1.0), out=out, show="lines"):
            if i == 4:
                raise RuntimeError("out of memory")
    assert out.getvalue().splitlines()[-1] == "shapes: 4/10 (40%) stopped after 5.0 s"


def test_off_shows_nothing_and_bad_arguments_say_what_is_wanted():
    assert run(range(50), 1.0, show="off") == (list(range(50)), [])
    with pytest.raises(ValueError, match="desc must be a non-empty string"):
        P.progress(range(3), "")
    with pytest.raises(ValueError, match="total must be a non-negative integer"):
        P.progress(range(3), "sweep", total=-1)
    with pytest.raises(ValueError, match="show must be one of"):
        P.progress(range(3), "sweep", show="bar")


def test_mode_reads_the_environment(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_PROGRESS", "off")
    assert P.mode() == "off"
    monkeypatch.setenv("GPUCOURSE_PROGRESS", "fancy")
    with pytest.raises(ValueError, match="GPUCOURSE_PROGRESS must be one of"):
        P.mode()
    monkeypatch.delenv("GPUCOURSE_PROGRESS")
    monkeypatch.setattr(P, "in_notebook", lambda widgets=False: True)
    assert P.mode() == "lines", "under pytest (nbval) nothing renders a widget: lines"
    monkeypatch.delenv("PYTEST_VERSION", raising=False)
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    assert P.mode() == "widget"
    monkeypatch.setattr(P, "in_notebook", lambda widgets=False: False)
    assert P.mode() == "lines"


def test_in_notebook_is_false_outside_a_kernel():
    assert P.in_notebook() is False and P.in_notebook(widgets=True) is False  # plain pytest: no kernel here


class FakeHandle:
    def __init__(self, obj):
        self.shown, self.updates = obj, []

    def update(self, obj, **kw):
        self.updates.append((obj, kw))


def test_the_notebook_bar_is_replaced_by_one_line_when_done(monkeypatch):
    handles = []

    def fake_display(obj, display_id=None, **kw):
        assert display_id is True, "the bar is displayed with a handle, so its end can replace it"
        handles.append(FakeHandle(obj))
        return handles[-1]

    monkeypatch.setattr("IPython.display.display", fake_display)
    values = []
    it = P.progress(range(8), "GEMV peers", clock=clock(1.0), show="widget")
    for i in it:
        if handles:
            bar, label = handles[0].shown.children
            values.append((bar.value, bar.max, label.value))
    assert len(handles) == 1, "one bar, created once the loop passed two seconds"
    h = handles[0]
    assert values[0] == (3, 8, "3/8 (38%), 3.0 s") and values[-1] == (7, 8, "7/8 (88%), 7.0 s")
    assert h.updates == [({"text/plain": "GEMV peers: 8/8 (100%) done in 8.0 s"}, {"raw": True})]
    bar, label = h.shown.children
    parts = [w for x in (bar, label, h.shown) for w in (x, x.layout, getattr(x, "style", None)) if w is not None]
    assert all(w.comm is None for w in parts), "the widgets and their layout and style models are closed"


def test_the_notebook_bar_never_appears_for_a_fast_loop(monkeypatch):
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: pytest.fail("nothing is displayed"))
    assert list(P.progress(range(5), "quick", clock=clock(0.1), show="widget")) == list(range(5))


def test_a_label_names_the_item_just_done():
    _, lines = run(["bf16 cuBLAS", "int8 (ours)", "int4 (ours)", "int8 torchao"], 1.0, show="lines",
                   label=lambda name: name)
    assert lines[0] == "sweep: 3/4 (75%) done after 3.0 s (last: int4 (ours))"
    assert lines[-1] == "sweep: 4/4 (100%) done in 4.0 s"
