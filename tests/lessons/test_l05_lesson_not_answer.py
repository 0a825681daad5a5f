"""Lesson 05 teaches restricted kernels, never the answers to its workbook (review N9; tests/test_lessons_not_answers.py
checks the text, this test checks the behaviour).

The code cells of notebooks/05_triton.ipynb tagged ``lesson-kernel`` (cell metadata ``"tags": ["lesson-kernel"]``)
are run in order in one namespace, in the mode the course runs in (CPU mode: Triton's interpreter, selected by
``import gpucourse``). Every plain Python function they define that can be called with the exercise function's number
of positional arguments goes through that exercise's ``gpucourse.check`` (correctness only: the speed is measured on
a GPU alone), and none may pass. As a control, the solved workbook's functions pass the same harness, so a harness
that fails everything cannot make this test pass.
"""
from __future__ import annotations

import inspect
import json
import linecache
import pathlib
import time

import pytest

import gpucourse
from gpucourse.solutions import cached_solutions

ROOT = pathlib.Path(__file__).resolve().parents[2]
LESSON = ROOT / "notebooks" / "05_triton.ipynb"
TAG = "lesson-kernel"
ARITY = {"vector_add": 2, "softmax": 1, "matmul": 2}  # positional arguments of each exercise's function
# What the lesson's setup cell (the one after `gpucourse.setup()`) gives every later cell.
PRELUDE = """\
import os
import matplotlib
matplotlib.use("Agg")  # a tagged cell may draw: no window
import matplotlib.pyplot as plt
import torch
import triton
import triton.language as tl
import gpucourse
DEV = gpucourse.torch_device()
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
"""


def tagged_sources(nb: dict) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nb["cells"]
            if c["cell_type"] == "code" and TAG in (c.get("metadata", {}).get("tags") or [])]


def run_cells(sources: list[str]) -> dict:
    """Execute the cells in order in one fresh namespace, after the names the lesson's setup cell defines."""
    ns = {"__name__": "l05_lesson_kernels"}
    exec(PRELUDE, ns)
    for i, source in enumerate(sources):
        # IPython-only lines (magics, shell escapes) are not Python.
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        filename = f"<notebooks/05_triton.ipynb lesson-kernel cell {i}>"
        # @triton.jit reads the kernel's source through inspect, which finds it in linecache.
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exec(compile(code, filename, "exec"), ns)
    return ns


def takes(fn, n: int) -> bool:
    """Whether fn can be called with exactly n positional arguments."""
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        return False
    return True


def candidates(ns: dict, exercise: str) -> dict:
    """The plain functions the lesson's cells defined (not imported) that take the exercise's arguments."""
    return {name: fn for name, fn in ns.items()
            if inspect.isfunction(fn) and fn.__code__.co_filename.startswith("<notebooks/05_triton.ipynb")
            and takes(fn, ARITY[exercise])}


def passes(exercise: str, fn) -> bool:
    return gpucourse.check(exercise, fn, quiet=True).passed


@pytest.fixture(scope="module")
def lesson_ns():
    sources = tagged_sources(json.loads(LESSON.read_text()))
    if not sources:
        pytest.xfail(f"no code cell of {LESSON.name} is tagged {TAG!r} yet: the lesson's restructuring into "
                     f"restricted teaching kernels (L05a) has not landed, so there is nothing to run")
    return run_cells(sources)


@pytest.mark.parametrize("exercise", list(ARITY))
def test_lesson_kernels_do_not_pass_the_exercise(lesson_ns, exercise):
    found = candidates(lesson_ns, exercise)
    assert found, (f"the cells tagged {TAG!r} define no function taking {ARITY[exercise]} argument(s): nothing to "
                   f"hold against {exercise!r}, so this test would pass vacuously")
    t0 = time.perf_counter()
    passing = [name for name, fn in found.items() if passes(exercise, fn)]
    assert not passing, (f"lesson 05's {', '.join(passing)} pass(es) gpucourse.check({exercise!r}): the lesson shows "
                         f"a complete answer to the workbook exercise (checked {sorted(found)} in "
                         f"{time.perf_counter() - t0:.0f} s)")


@pytest.mark.parametrize("exercise", list(ARITY))
def test_control_the_solved_workbook_passes_the_same_harness(exercise):
    ns = cached_solutions("05_triton")
    assert takes(ns[exercise], ARITY[exercise])
    assert passes(exercise, ns[exercise])


def test_harness_runs_tagged_cells_in_order_in_one_namespace():
    """run_cells/candidates on a synthetic notebook: later cells see earlier names, imported names are not candidates,
    untagged cells are not run."""
    nb = {"cells": [
        {"cell_type": "code", "metadata": {"tags": [TAG]}, "source": ["SCALE = 2\n", "%time pass\n"]},
        {"cell_type": "code", "metadata": {}, "source": ["raise RuntimeError('untagged cells are not run')\n"]},
        {"cell_type": "code", "metadata": {"tags": [TAG]},
         "source": ["def double(x):\n", "    return x * SCALE\n", "def pair(x, y, z=0):\n", "    return x, y\n"]},
    ]}
    ns = run_cells(tagged_sources(nb))
    assert ns["double"](3) == 6
    assert set(candidates(ns, "softmax")) == {"double"} and set(candidates(ns, "matmul")) == {"pair"}
