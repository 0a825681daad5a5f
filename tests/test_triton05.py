"""Lesson 05's exercises: the known-wrong softmax/matmul submissions fail for the right reason through the real
`gpucourse grade` command, the right ones pass, and the reference solutions loaded from the solved workbook pass
`gpucourse.check` (the workbook is the single source of those kernels; the benchmarks load them the same way)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import gpucourse
from gpucourse.solutions import load_solutions, solution_source

HERE = os.path.dirname(os.path.abspath(__file__))

# exercise -> file -> (status, cases that must fail, cases that must pass, substring of the first failure's detail)
EXPECTED = {
    "softmax": {
        "right_softmax.py": ("passed", [], ["width 16384", "large magnitudes (x1e4)"], None),
        "wrong_no_max_subtraction.py": ("failed", ["large magnitudes (x1e4)", "large magnitudes (x1e4), fp16"],
                                        ["width 1023", "width 16384", "strided rows: big[:, :w], w=777"], "NaN"),
        "wrong_fixed_block_width.py": ("failed", ["width 1025", "width 16384", "width 16384, fp16",
                                                  "width 3001 (not a power of two), fp16"],
                                       ["width 1", "width 1023", "large magnitudes (x1e4)"],
                                       "elements never written"),
        "wrong_contiguous_only.py": ("failed", ["strided rows: big[:, :w], w=777",
                                                "strided rows: big[::2], fp16, w=300"],
                                     ["width 1025", "width 16384", "large magnitudes (x1e4)"], None),
    },
    "matmul": {
        "right_matmul.py": ("passed", [], ["fp16 100x70, K=33 (K tail)"], None),
        "wrong_unmasked_k_tail.py": ("failed", ["fp16 100x70, K=33 (K tail)", "fp32 65x33, K=129 (TF32 allowed)"],
                                     ["fp16 64x64x64 (whole blocks)", "fp16 large, not multiples of any block"],
                                     "non-finite output"),
    },
}


def _grade(exercise: str, tmp_path) -> dict:
    folder = os.path.join(HERE, "submissions", exercise)
    files = sorted(f for f in os.listdir(folder) if f.endswith((".py", ".ipynb")))
    assert files == sorted(EXPECTED[exercise]), "every submission needs an entry in EXPECTED (and vice versa)"
    out = tmp_path / f"{exercise}.json"
    proc = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", exercise,
                           *[os.path.join(folder, f) for f in files], "--jobs", "2", "--timeout", "120",
                           "--json", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {os.path.basename(r["submission"]): r for r in json.loads(out.read_text())["results"]}


@pytest.mark.parametrize("exercise", sorted(EXPECTED))
def test_known_submissions_get_their_verdict(exercise, tmp_path):
    results = _grade(exercise, tmp_path)
    for name, (status, must_fail, must_pass, detail) in EXPECTED[exercise].items():
        r = results[name]
        assert r["status"] == status, f"{name}: {r['status']}: {r['message']}"
        checks = {c["name"]: c for c in r["checks"]}
        for case in must_fail:
            assert not checks[case]["passed"], f"{name} should fail {case!r}"
        for case in must_pass:
            assert checks[case]["passed"], f"{name} should pass {case!r}: {checks[case]['detail']}"
        if detail is not None:
            assert detail in r["message"], f"{name}: {r['message']}"


def test_reference_solutions_from_the_workbook_pass_check():
    ns = load_solutions("05_triton")
    for exercise in ("vector_add", "softmax", "matmul"):
        result = gpucourse.check(exercise, ns[exercise], quiet=True)
        assert result.passed, result.report()


def test_solution_source_is_only_imports_and_solution_cells():
    src = solution_source("05_triton")
    assert "gpucourse.check(" not in src and "### BEGIN SOLUTION" in src
    assert "import triton" in src  # import-only cells come along, the setup and check cells do not
