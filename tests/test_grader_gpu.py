"""GPU only: a CUDA fault in one submission is contained in its process; the next submission is still graded."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import gpucourse
from submissions_util import describe, expectation, load_expected, misgraded, right_submission

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.gpu
def test_cuda_fault_is_contained(tmp_path):
    fault = os.path.join(HERE, "submissions", "gpu", "crash_cuda_fault.py")
    right = os.path.join(HERE, "submissions", "vector_add", "right_basic.py")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", "vector_add", fault, right, right,
                           "--json", str(out), "--timeout", "120"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())["results"]
    fault_expected = expectation(load_expected("gpu")["EXPECTED"]["crash_cuda_fault.py"], "gpu")
    problems = misgraded(results[0], fault_expected)  # crashed or error: tests/submissions/gpu/expected.py
    assert not problems, describe("crash_cuda_fault.py", results[0], problems)
    assert [r["status"] for r in results[1:]] == ["passed", "passed"], results[1:]
    assert "GB/s" in results[1]["message"]  # the speed line (GPU only), apart from the verdict


@pytest.mark.gpu
def test_perf_is_reported_apart_from_correctness(capsys):
    vector_add = right_submission("right_strided_kernel.py")

    r = gpucourse.check("vector_add", vector_add)
    assert r.passed, r.report()
    assert r.perf.startswith("speed (GPU, separate from correctness)") and "x a torch copy" in r.perf


@pytest.mark.gpu
def test_matmul_speed_is_held_to_its_dtypes_peak_without_a_false_alarm():
    """measure_perf declares matmul's flops and the inputs' dtype to bench: a right kernel is not above the peak."""
    matmul = right_submission("right_matmul.py", "matmul")

    r = gpucourse.check("matmul", matmul, quiet=True)
    assert r.passed, r.report()
    assert "x the speed of the reference" in r.perf and "above this GPU's peak" not in r.perf


@pytest.mark.gpu
def test_a_cuda_submission_is_compiled_by_a_worker_that_sees_no_gpu_and_then_only_loaded(tmp_path):
    """grader._prebuild: the extension is built in the submission's private folder by a worker with no GPU (and no
    GPU lock held); the graded worker then loads it, and its first call does no compiling."""
    import time

    from gpucourse.grading import grader, sandbox
    from gpucourse.grading.exercise import get

    ex = get("block_sum")
    path = os.path.join(HERE, "submissions", "block_sum", "right_atomic_per_block.py")
    iso = sandbox.detect("process")
    t0 = time.monotonic()
    grader._prebuild(ex, path, str(tmp_path), iso, time.monotonic() + 300, grader.MEMORY_MB)
    built = [f for _, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".so")]
    assert built, f"no extension built by the prebuild worker in {time.monotonic() - t0:.1f} s"
    r = grader.grade_one(ex, path, timeout=300, isolation=iso)
    assert r.status == "passed", r.message
