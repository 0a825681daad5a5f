"""gpucourse.tables: the layout rules, and tables of the committed notebooks reproduced character for character from
their numbers, through the code the notebooks and lesson 10's report run now."""
import contextlib
import doctest
import io
import json
import os
import re
import types

import pytest

import gpucourse.tables
from gpucourse.tables import table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_module_example_holds():
    assert doctest.testmod(gpucourse.tables).failed == 0


def test_sized_to_content_text_left_numbers_right():
    got = table([("a", 1.5, 10), ("longer", 22.25, None)], ["name", "x", "n"], formats=[None, ".2f", None])
    assert got.splitlines() == ["name        x   n",
                                "a        1.50  10",
                                "longer  22.25   -"]


def test_formats_spec_template_function_and_by_header():
    rows = [(0.5, 2.0, 3, 1024)]
    assert table(rows, ["p", "x", "t", "b"], formats=[".0%", "{:.2f}x", "{:.1f} ms", lambda v: f"{v // 1024} KiB"]) \
        .splitlines()[1] == "50%  2.00x  3.0 ms  1 KiB"
    assert table(rows, ["p", "x", "t", "b"], formats={"x": "{:.1f}x"}).splitlines()[1] == "0.5  2.0x  3  1024"


def test_fixed_widths_pad_as_an_f_string_does():
    rows = [("copy", 1234567, 0.98765), ("a name far too long for its column", 1, 12345.6)]
    got = table(rows, ["kernel", "n", "ratio"], formats=[None, ",", ".2f"], widths=[12, 12, 8]).splitlines()
    assert got[0] == f"{'kernel':<12}{'n':>12}{'ratio':>8}"
    for (name, n, r), line in zip(rows, got[1:]):
        assert line == f"{name:<12}{n:>12,}{r:>8.2f}"  # an entry wider than its column pushes the rest right


def test_separators_one_or_per_gap_and_columns_of_only_none_align_right():
    got = table([(1, 2, "x"), (10, None, "yy")], ["a", "b", "c"], widths=[3, 4, None], sep=[" ", "  "])
    assert got.splitlines() == ["  a    b  c", "  1    2  x", " 10    -  yy"]
    got = table([("r", None)], ["", "host"], widths=[3, 6], missing="")
    assert got.splitlines() == ["     host", "r"]  # an empty entry leaves no trailing blanks


def test_notes_title_rule_indent_and_no_header():
    got = table([("a", 1), "note under a", ("b", 22)], ["k", "v"], title="T", rule="-", indent="  ")
    assert got.splitlines() == ["T", "  k   v", "  -----", "  a   1", "note under a", "  b  22"]
    assert table([("a", 1)], None, widths=[3, 4]) == "a     1"
    assert table([], ["k", "v"]) == "k  v"


def test_align_overrides_the_default():
    assert table([("a", "b")], ["x", "y"], widths=[3, 3], align="><").splitlines() == ["  xy", "  ab"]


@pytest.mark.parametrize("call, message", [
    (lambda: table([(1, 2, 3)], ["a", "b"]), "a row of 3 values for 2 columns"),
    (lambda: table([(1, 2)], ["a", "b"], formats=[None]), "1 formats for 2 columns"),
    (lambda: table([(1, 2)], ["a", "b"], widths={"c": 3}), r"widths for columns the table does not have: \['c'\]"),
    (lambda: table([(1, 2)], None, formats={"a": ".1f"}), "formats given by header, but the table has no header"),
    (lambda: table([(1, 2)], ["a", "b"], align="<"), "align needs one"),
    (lambda: table([(1, 2)], ["a", "b"], sep=[" ", " "]), "2 separators for 2 columns"),
])
def test_mistakes_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- committed tables, reproduced ------------------------------------------------------------------------------------

def _cell(notebook: str, marker: str) -> tuple[str, str]:
    """(source, printed text) of the one code cell of a committed notebook whose source contains ``marker``."""
    with open(os.path.join(ROOT, "notebooks", notebook + ".ipynb"), encoding="utf-8") as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"])]
    assert len(cells) == 1, (notebook, marker, len(cells))
    text = "".join("".join(o["text"]) for o in cells[0].get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return "".join(cells[0]["source"]), text


def _run(source: str, **names) -> str:
    """The cell's printed text, run with a GPU mode stand-in and the given names (measurements stubbed)."""
    gpu = types.SimpleNamespace(skip_unless_gpu=lambda *a: False, on_gpu=lambda: True,
                                benchmarks=types.SimpleNamespace(record=lambda name, res, show=True: res))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<cell>", "exec"), {"gpucourse": gpu, "table": table, **names})
    return out.getvalue()


def _in_order(lines: list, text: str) -> bool:
    rest = iter(text.splitlines())
    return all(any(line == c for c in rest) for line in lines)


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def test_lesson_08_score_sizes_table_as_committed():
    from gpucourse.lessons.l08_flash_attention import measure
    import inspect

    source, committed = _cell("08_flash_attention", "measure.score_bytes")
    assert _run(source, measure=measure, inspect=inspect) == committed


def test_lesson_04_ladder_table_from_its_committed_numbers():
    source, committed = _cell("04_cuda_reduction", "measure.ladder()")
    lines = committed.splitlines()
    head = lines.index(next(ln for ln in lines if ln.startswith("kernel ")))
    rows = {}
    for ln in lines[head + 1:]:
        n, gbps, _ = ln[30:].split()
        rows[ln[:30].strip()] = {"n": int(_num(n)), "gbps": _num(gbps)}
    printed = _run(source, measure=types.SimpleNamespace(ladder=lambda: rows)).splitlines()
    # the last column is a ratio of GB/s the cell computes from unrounded figures, here from the printed (rounded)
    # ones: it may differ in its last digit, the rest of each line must match exactly
    assert len(printed) == len(lines[head:]) and printed[0] == lines[head]
    for got, want in zip(printed[1:], lines[head + 1:]):
        assert got.rsplit(" ", 1)[0] == want.rsplit(" ", 1)[0] and len(got) == len(want), (got, want)
        assert abs(float(got.rsplit(" ", 1)[1]) - float(want.rsplit(" ", 1)[1])) <= 0.011, (got, want)


def test_lesson_02_training_loop_table_from_its_committed_numbers():
    source, committed = _cell("02_async_pipeline", "measure.training_loop_study()")
    lines = committed.splitlines()
    head = lines.index(next(ln for ln in lines if ln.startswith("version ")))
    rows = {}
    for ln in lines[head + 1:]:
        ms, speedup, busy, idle, profiled = (float(x) for x in re.sub("[x%]|ms", " ", ln[28:]).split())
        rows[ln[:28].strip()] = dict(ms_per_step=ms, speedup_vs_naive=speedup, gpu_busy_ms_per_step=busy,
                                     gpu_idle_fraction=idle / 100, profiled_idle_fraction=profiled / 100)
    study = types.SimpleNamespace(training_loop_study=lambda: {"rows": rows})
    source = source.replace("from gpucourse.lessons.l02_async_pipeline import measure", "pass")
    assert _run(source, measure=study).splitlines() == lines[head:]


def test_lesson_08_sweep_table_with_missing_entries_from_its_committed_numbers():
    from unittest import mock

    from gpucourse.lessons.l08_flash_attention import measure

    source, committed = _cell("08_flash_attention", "measure.forward_sweep()")
    names = [measure.OURS, measure.WORKBOOK, measure.FLEX, "SDPA FLASH_ATTENTION", "SDPA CUDNN_ATTENTION",
             "SDPA EFFICIENT_ATTENTION", "SDPA MATH", "naive"]
    lines = committed.splitlines()
    first = lines.index(next(ln for ln in lines if ln.startswith("TFLOP/s")))
    last = lines.index(next(ln for ln in lines if ln.startswith("spread")))
    sweep = []
    for ln in lines[first + 2:last]:
        f = ln.split()
        sweep.append({"s": int(f[0]), "d": int(f[1]), "causal": f[2] == "True", "skipped": {}, "sdpa_default": f[-1],
                      "tflops": {n: _num(x) for n, x in zip(names, f[3:-1]) if x != "-"}})
    assert any("-" in ln.split() for ln in lines[first + 2:last])  # the committed table has missing entries
    noise = {"n": 1, "median": 0.0, "max": 0.0, "where": {"name": "-", "s": 0, "d": 0, "causal": False}}
    stub = types.SimpleNamespace(forward_sweep=lambda: sweep, noise=lambda s: noise, OURS=measure.OURS,
                                 WORKBOOK=measure.WORKBOOK, FLEX=measure.FLEX)
    plt = mock.MagicMock(**{"subplots.return_value": (mock.MagicMock(), [mock.MagicMock() for _ in range(4)])})
    printed = _run(source, measure=stub, plt=plt).splitlines()
    assert printed[:-1] == lines[first:last]


@pytest.mark.parametrize("task, function", [("comm", "comm_table"), ("ddp", "ddp_table"), ("fsdp", "fsdp_table")])
def test_lesson_10_recorded_tables_as_committed(task, function):
    """The cells that print the recorded multi-GPU runs: the report's tables of those runs, line for line."""
    from gpucourse.lessons.l10_training_scale import launch, report

    _, committed = _cell("10_training_scale", f'launch.recorded_task("{task}", world)')
    shown = 0
    for world in (2, 4):
        rec = launch.recorded(world)
        if rec is None:
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            getattr(report, function)(rec["tasks"][task])
        assert _in_order(out.getvalue().splitlines(), committed), (world, out.getvalue())
        shown += 1
    if not shown:
        pytest.skip("no recorded multi-GPU run in this checkout")
