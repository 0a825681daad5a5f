"""Every known submission in tests/submissions/<exercise>/ gets the verdict its folder's expected.py states, from
the real command line: one `gpucourse grade <exercise> <files...> --jobs 2 --timeout T --json F` call per folder
(every file but expected.py), plus one with a short --timeout for the files that hang on purpose.

expected.py, in each folder::

    EXPECTED = {
        "right_basic.py": {"status": "passed", "message": "all 6 cases passed"},
        "wrong_x.py": {"status": "failed", "message": "substring of the verdict message",
                       "flags": [...],   # optional: substrings each found in one of the report's flags
                       "fails": [...],   # optional: cases that must fail
                       "passes": [...],  # optional: cases that must pass
                       "gpu": {...},     # optional: keys overriding the above in GPU mode ("cpu" likewise)
                       },
    }
    GPU_ONLY = False  # True only for exercises that cannot be graded at all without a GPU

"status" None means any status, "message" None any message; a tuple for either means any one of them. Optional
module-level settings: ``HANGS = (files...)``, files that hang on purpose, graded in a second call with
``--timeout 10`` (a timeout must be killed within 30 s of it); ``EXERCISE = "vector_add"``, the exercise a folder not
named after one is graded as (tests/submissions/gpu/). A GPU_ONLY folder is skipped in CPU mode (`gpucourse grade`
refuses it there), its "cpu" keys being what gpucourse.check says in CPU mode (its lesson's tests check that).

Besides its expectation, every result must be consistent: the report's schema, a verdict for every case when
passed or failed with the score the fraction passed (score 0 otherwise), and its line in the text report. A
submission without an expectation fails, and so does an expectation without a submission. Every misgraded file is
named in one failure message, with its status, message and flags.
"""
from __future__ import annotations

import json
import os

import pytest

import gpucourse
from gpucourse.grading.exercise import get
from gpucourse.grading import sandbox
from submissions_util import (HANG_TIMEOUT, PLANTED_SECRET, describe, expectation, folders, load_expected, misgraded,
                              submission_files)

RESULT_KEYS = {"submission", "status", "score", "message", "checks", "flags", "seconds", "timing"}


def consistency(result: dict, case_names: list, hang: bool) -> list:
    """What is wrong with a result whatever its expectation: its keys, its score against its checks, a timeout's
    time."""
    wrong = []
    if set(result) - {"perf"} != RESULT_KEYS:  # perf: only where a speed was measured (GPU)
        return [f"result keys {sorted(result)}"]
    names = [c["name"] for c in result["checks"]]
    n_pass = sum(c["passed"] for c in result["checks"])
    if result["status"] in ("passed", "failed"):  # a verdict for every case
        if names != case_names:
            wrong.append(f"checks {names}, expected one per case {case_names}")
        elif result["score"] != n_pass / len(names):
            wrong.append(f"score {result['score']} for {n_pass} of {len(names)} cases passed")
        if (result["status"] == "passed") != (n_pass == len(names)):
            wrong.append(f"{result['status']} with {n_pass} of {len(names)} cases passed")
    elif result["score"] != 0.0:
        wrong.append(f"score {result['score']}, expected 0 for {result['status']}")
    # The grader's --timeout: only for HANGS, and killed soon after it. (A judge's own deadline, e.g. deadlocked
    # ranks, is a timeout verdict with the judge's message, within the normal --timeout.)
    if result["status"] == "timeout" and result["message"].startswith("over the time limit") and not (
            hang and result["seconds"] < HANG_TIMEOUT + 30):
        wrong.append(f"timed out after {result['seconds']:.0f} s (killed within 30 s of --timeout "
                     f"{HANG_TIMEOUT}, in HANGS?)")
    return wrong


@pytest.mark.parametrize("folder", folders())
def test_known_submissions_get_their_verdict(folder, known_grades):
    settings = load_expected(folder)
    files, expected = submission_files(folder), settings["EXPECTED"]
    assert files == sorted(expected), (
        f"tests/submissions/{folder}: submissions without an expectation in expected.py: "
        f"{sorted(set(files) - set(expected))}; expectations without a submission: "
        f"{sorted(set(expected) - set(files))}")
    mode = "gpu" if gpucourse.on_gpu() else "cpu"
    if settings["GPU_ONLY"] and mode == "cpu":
        pytest.skip(f"{folder}: GPU_ONLY, `gpucourse grade {settings['EXERCISE']}` needs a CUDA GPU (CPU mode)")
    isolation = sandbox.detect()
    if settings["SANDBOX"] and not isolation.sandboxed:
        pytest.skip(f"{folder}: SANDBOX, these submissions try to escape the grader's sandbox and would succeed "
                    f"without one; here: {isolation.detail}")
    graded = known_grades(folder)
    case_names = [c.name for c in get(settings["EXERCISE"]).cases]
    wrong, seen = [], []
    for call in graded["calls"]:
        assert call["returncode"] == 0, call["stdout"] + call["stderr"]
        report = call["report"]
        assert set(report) == {"exercise", "environment", "isolation", "standing", "results"}
        assert report["exercise"] == settings["EXERCISE"] and report["isolation"] == isolation.to_dict()
        assert PLANTED_SECRET[1] not in json.dumps(report) + call["stdout"] + call["stderr"]
        assert [r["submission"] for r in report["results"]] == call["paths"]  # paths as given, in order
        for r in report["results"]:
            name = os.path.basename(r["submission"])
            seen.append(name)
            problems = consistency(r, case_names, hang=name in settings["HANGS"])
            if set(r) - {"perf"} == RESULT_KEYS:
                problems += misgraded(r, expectation(expected[name], mode))
                if f"{r['status']:<8} {r['score']:.2f}  {r['message']}" not in call["stdout"]:
                    problems.append("its line is missing from the text report")
            if problems:
                wrong.append(describe(name, r, problems))
    assert sorted(seen) == files
    assert not wrong, f"{len(wrong)} misgraded in tests/submissions/{folder} ({mode} mode):\n" + "\n".join(wrong)
