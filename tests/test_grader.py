"""The batch grader (`gpucourse grade`) against the known-wrong and known-right submissions in tests/submissions/.

The whole folder is graded once, through the real command line with --jobs 2, and every file must get its expected
status for the expected reason. Adding a submission file without adding it to EXPECTED fails the suite.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

import pytest

import gpucourse
from gpucourse.grading import grader

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "submissions", "vector_add")
# Seconds per submission. The two that hang on purpose are graded in a second call with a short limit, so the limit
# for everything else can be generous: a loaded 2-core CI machine must not turn a slow, correct submission into a
# timeout. On a GPU each worker also initialises CUDA and compiles into its own Triton cache.
TIMEOUT = 180 if gpucourse.on_gpu() else 120
HANG_TIMEOUT = 10
HANGS = ("hang_infinite_loop.py", "timeout_import.py")

# file -> (status, substring of the message (None: any), substrings that must appear among the flags)
EXPECTED = {
    "right_basic.py": ("passed", "all 6 cases passed", []),
    "right_strided_kernel.py": ("passed", "all 6 cases passed", []),
    "right_noisy_prints.py": ("passed", "all 6 cases passed", ["MB of output"]),
    "right_notebook_magics_plot.ipynb": ("passed", "all 6 cases passed", []),
    "wrong_unwritten_tail.py": ("failed", "elements never written", []),
    "wrong_hardcoded_size.py": ("failed", "past the end of a 1-element output", []),
    "wrong_torch_not_triton.py": ("failed", "no Triton kernel was launched", ["calls aten.add"]),
    "wrong_dtype.py": ("failed", "wrong dtype: expected float32, got float16", []),
    "wrong_nan.py": ("failed", "NaN", []),
    "wrong_oob_write.py": ("failed", "out-of-bounds write", []),
    "wrong_inplace_input.py": ("failed", "modified its input", []),
    "wrong_nondeterministic.py": ("failed", "nondeterministic", []),
    "wrong_shape.py": ("failed", "wrong shape", []),
    "error_syntax.py": ("error", "syntax error", []),
    "error_raises.py": ("error", "raised IndexError", []),
    "error_missing_function.py": ("error", "does not define `vector_add`", []),
    "error_not_implemented.py": ("error", "not implemented yet", []),
    "hang_infinite_loop.py": ("timeout", "time limit", []),
    "timeout_import.py": ("timeout", "time limit", []),
    "crash_segfault.py": ("crashed", "SIGSEGV", ["ctypes"]),
    "crash_abort.py": ("crashed", "SIGABRT", []),
    "crash_os_exit.py": ("crashed", "exited (code 0)", ["exits or signals"]),
    "cheat_monkeypatch_allclose.py": ("failed", "elements differ", ["monkeypatches torch", "reaches into the grader"]),
    "cheat_cached_outputs.py": ("failed", "elements differ", []),
    "cheat_gc_walk.py": ("failed", "elements differ", ["garbage collector"]),
    "cheat_fake_print.py": ("failed", "elements differ", []),
    "cheat_sys_exit.py": ("error", "exit(0)", []),
    # The documented limitation: code in the worker can forge what the worker reports about itself (launches).
    # The values are right, so it is not caught as wrong; it must be flagged for a human instead.
    "cheat_forge_launch_count.py": (None, None, ["reaches into the grader", "calls aten.add"]),
}


def _grade(args, **kw):
    return subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", *args], capture_output=True, text=True,
                          **kw)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Everything but the two hangs in one call (its exit status, JSON order and CSV are what the contract tests
    read), the hangs in a second; the report holds both calls' results."""
    out = tmp_path_factory.mktemp("grade")
    paths = [os.path.join(FOLDER, f) for f in sorted(os.listdir(FOLDER)) if f not in HANGS]
    t0 = time.perf_counter()
    proc = _grade(["vector_add", *paths, "--jobs", "2", "--timeout", str(TIMEOUT), "--json", str(out / "r.json"),
                   "--csv", str(out / "r.csv")], timeout=1800)
    seconds = time.perf_counter() - t0
    print(f"graded {len(paths)} submissions in {seconds:.1f} s (--jobs 2)")
    hangs = _grade(["vector_add", *[os.path.join(FOLDER, f) for f in HANGS], "--jobs", "2", "--timeout",
                    str(HANG_TIMEOUT), "--json", str(out / "hangs.json")], timeout=600)
    assert hangs.returncode == 0, hangs.stderr
    report = json.loads((out / "r.json").read_text())
    report["results"] += json.loads((out / "hangs.json").read_text())["results"]
    return proc, report, out / "r.csv", paths


def test_every_submission_file_has_an_expectation():
    assert sorted(os.listdir(FOLDER)) == sorted(EXPECTED)


def test_exit_status_zero_when_all_graded(graded):
    proc, report, _, paths = graded
    assert proc.returncode == 0, proc.stderr
    assert [r["submission"] for r in report["results"]][:len(paths)] == paths  # paths as given, in order


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_status_and_reason(graded, name):
    _, report, _, _ = graded
    (r,) = [r for r in report["results"] if os.path.basename(r["submission"]) == name]
    status, reason, flags = EXPECTED[name]
    detail = f"{name}: {r['status']} {r['message']} {r['flags']}"
    if status is not None:
        assert r["status"] == status, detail
    if reason is not None:
        assert reason in r["message"], detail
    for flag in flags:
        assert any(flag in f for f in r["flags"]), detail
    if r["status"] == "passed":
        assert r["score"] == 1.0 and all(c["passed"] for c in r["checks"]), detail
    elif r["status"] == "failed":
        assert 0.0 <= r["score"] < 1.0 and not all(c["passed"] for c in r["checks"]), detail
    else:
        assert r["score"] == 0.0, detail
    if status == "timeout":
        assert r["seconds"] < HANG_TIMEOUT + 30, detail  # killed soon after its limit, process group and all


def test_json_schema_exactly(graded):
    _, report, _, _ = graded
    assert set(report) == {"exercise", "environment", "results"}
    assert report["exercise"] == "vector_add"
    env = report["environment"]
    for key in ("mode", "gpu", "driver", "torch", "triton", "fingerprint"):
        assert key in env
    assert env["mode"] in ("cpu", "gpu")
    for r in report["results"]:
        assert set(r) == {"submission", "status", "score", "message", "checks", "flags", "seconds"}
        assert r["status"] in ("passed", "failed", "error", "timeout", "crashed")
        assert isinstance(r["score"], float) and 0.0 <= r["score"] <= 1.0
        assert isinstance(r["message"], str) and r["message"]
        assert isinstance(r["flags"], list) and all(isinstance(f, str) for f in r["flags"])
        assert isinstance(r["seconds"], float) and r["seconds"] > 0
        for c in r["checks"]:
            assert set(c) == {"name", "passed", "detail"}
            assert isinstance(c["name"], str) and isinstance(c["passed"], bool) and isinstance(c["detail"], str)


def test_failed_checks_say_which_case(graded):
    _, report, _, _ = graded
    (r,) = [r for r in report["results"] if r["submission"].endswith("wrong_unwritten_tail.py")]
    names = [c["name"] for c in r["checks"]]
    assert names == ["n=1", "n=1023", "n=1025", "n=3001 (not a power of two)", "strided x[::2], n=777", "large"]
    tail = next(c for c in r["checks"] if c["name"] == "n=1023")
    assert not tail["passed"] and "the tail from index 768" in tail["detail"]


def test_csv_one_row_per_submission(graded):
    _, report, csv_path, paths = graded
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["submission"] for r in rows] == paths
    for row, r in zip(rows, report["results"][:len(paths)]):
        assert row["status"] == r["status"]
        assert float(row["score"]) == pytest.approx(r["score"], abs=1e-4)
        assert row["message"] == r["message"]
        assert row["torch"] == report["environment"]["torch"] and row["fingerprint"]
        assert row["gpu"] and "triton" in row


def test_unknown_exercise_is_a_usage_error():
    proc = _grade(["no_such_exercise", os.path.join(FOLDER, "right_basic.py")])
    assert proc.returncode == 2
    assert "unknown exercise 'no_such_exercise'" in proc.stderr and "vector_add" in proc.stderr


def test_missing_file_is_a_usage_error(tmp_path):
    proc = _grade(["vector_add", str(tmp_path / "nope.py")])
    assert proc.returncode == 2
    assert "no such submission" in proc.stderr


def test_no_arguments_is_a_usage_error():
    proc = _grade([])
    assert proc.returncode == 2


def test_help_names_the_statuses():
    proc = _grade(["--help"])
    assert proc.returncode == 0
    for word in ("passed", "failed", "error", "timeout", "crashed", "score"):
        assert word in proc.stdout


def test_static_flags():
    assert grader.static_flags("import gc\nfor o in gc.get_objects(): pass") == [
        "source walks the garbage collector (gc.get_objects/referrers)"]
    assert grader.static_flags("def vector_add(x, y):\n    return x + y\n") == []
    assert any("ctypes" in f for f in grader.static_flags("import ctypes"))
