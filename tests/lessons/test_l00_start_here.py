"""Lesson 00: its exercise (relu, the checker's first example) from the solved workbook, and its benchmarks (the
device's ceilings and the timer's agreement with triton.testing.do_bench)."""
from __future__ import annotations

import torch

import gpucourse
from gpucourse import benchmarks, lessons
from gpucourse.solutions import load_solutions


def test_the_workbook_solution_passes_and_returning_the_input_fails():
    relu = load_solutions(lessons.get("00").notebook)["relu"]
    assert gpucourse.check("relu", relu, quiet=True).passed
    wrong = gpucourse.check("relu", lambda x: x.clone(), quiet=True)
    assert wrong.status == "failed" and not all(c.passed for c in wrong.cases)
    assert torch.equal(relu(torch.tensor([-1.0, 0.0, 2.0])), torch.tensor([0.0, 0.0, 2.0]))


def test_lesson00_benchmarks_registered_gpu_only():
    reg = benchmarks.registry()
    names = sorted(n for n in reg if reg[n]["lesson"] == "00")
    assert names == ["ceilings", "timing_agreement"]
    assert all(reg[n]["gpu_only"] for n in names)
