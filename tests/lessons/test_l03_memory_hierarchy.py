"""Lesson 03's exercises: the reference solutions from the solved workbook pass, known-wrong answers fail for the
right reason (a wrong intensity or bound fails naming the op; the two-kernel chain in tests/submissions/ fails the
launch count, in tests/test_known_submissions.py), and the lesson's measurement functions run (small, in CPU mode)
so the GPU session does not meet their bugs first."""
from __future__ import annotations

import pytest

import gpucourse
from gpucourse.lessons.l03_memory_hierarchy import measure as memory03
from gpucourse.grading.exercise import get
from gpucourse.solutions import load_solutions, solution_source


@pytest.fixture(scope="module")
def ns():
    return load_solutions("03_memory_hierarchy")


def test_reference_solutions_pass_check(ns):
    for exercise in ("roofline_classify", "fused_swish_residual"):
        result = gpucourse.check(exercise, ns[exercise], quiet=True)
        assert result.passed, result.report()


def test_solution_source_has_both_solutions_and_no_checks():
    src = solution_source("03_memory_hierarchy")
    assert "def roofline_classify" in src and "def fused_swish_residual" in src and "gpucourse.check(" not in src


def test_torch_only_chain_fails_for_launching_no_kernel():
    import torch

    result = gpucourse.check("fused_swish_residual", lambda x, y: x * torch.sigmoid(x) + y, quiet=True)
    assert result.status == "failed"
    assert "no Triton kernel was launched" in result.cases[0].problems[0]


def test_wrong_intensity_fails_naming_the_op(ns):
    def wrong(ops, ceilings):  # forgets that bfloat16 has 2 bytes: counts 4 for the GEMV
        out = ns["roofline_classify"](ops, ceilings)
        out["gemv"] = (out["gemv"][0] / 2, out["gemv"][1])
        return out

    result = gpucourse.check("roofline_classify", wrong, quiet=True)
    assert result.status == "failed"
    for case in result.cases:
        assert [p for p in case.problems if p.startswith("op 'gemv': intensity expected")], case.problems
        assert not any("'relu'" in p for p in case.problems)


def test_wrong_bound_and_missing_op_fail_naming_the_op(ns):
    def wrong(ops, ceilings):
        out = ns["roofline_classify"](ops, ceilings)
        out["gemm_square"] = (out["gemm_square"][0], "memory" if out["gemm_square"][1] == "compute" else "compute")
        del out["relu"]
        return out

    result = gpucourse.check("roofline_classify", wrong, quiet=True)
    problems = [p for c in result.cases for p in c.problems]
    assert any(p.startswith("op 'gemm_square': bound expected") for p in problems)
    assert any(p == "op 'relu': missing from your dict" for p in problems)


def test_classify_not_a_dict_and_not_implemented():
    r = gpucourse.check("roofline_classify", lambda ops, c: [1, 2], quiet=True)
    assert r.status == "failed" and "expected a dict" in r.cases[0].problems[0]

    def stub(ops, c):
        raise NotImplementedError

    assert gpucourse.check("roofline_classify", stub, quiet=True).status == "not implemented"


def test_classify_inputs_change_with_the_seed():
    import torch

    ex = get("roofline_classify")
    from gpucourse.lessons.l03_memory_hierarchy.exercises.roofline_classify import make_inputs

    draws = {str(make_inputs(ex.cases[1].params, torch.Generator().manual_seed(s))[0]) for s in range(6)}
    assert len(draws) > 1


def test_measurement_functions_run_small():
    from gpucourse import roofline as R

    q = memory03.QUICK
    ws = memory03.working_set(sizes=[2**16, 2**18], bench_kw=q)
    assert len(ws["gbps"]) == 2 and all(g > 0 for g in ws["gbps"])
    acc = memory03.access_patterns(n=2**8, src_len=2**14, bench_kw=q)
    assert [r["pattern"] for r in acc["rows"]][:2] == ["coalesced", "stride 2"]
    assert acc["rows"][-1]["model_efficiency"] == 1 / 8
    pts = memory03.roofline_points(R.spec_ceilings("H100-SXM"), ops=memory03.default_ops("cpu")[:2], bench_kw=q)
    assert [p["bound"] for p in pts] == ["memory", "memory"] and all(p["seconds"] > 0 for p in pts)
    f = memory03.fusion(n=2**10, rows=4, cols=64, compile=False, bench_kw=q)
    assert set(f) == {"sin4", "ln_relu_add", "swish_residual"}
    assert f["swish_residual"]["bytes_moved"]["eager"] == 8 * 2**10 * 4
    assert "torch.compile" not in f["sin4"]


def test_lesson03_benchmarks_are_registered_gpu_only():
    from gpucourse import benchmarks

    reg = benchmarks.registry()
    names = {"memory03_working_set", "memory03_access", "memory03_roofline", "memory03_fusion"}
    assert names <= set(reg) and all(reg[n]["gpu_only"] and reg[n]["lesson"] == "03" for n in names)
