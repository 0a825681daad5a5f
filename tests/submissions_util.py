"""The known submissions in tests/submissions/<folder>/ and their expected verdicts (the folder's expected.py).

``right_submission`` loads a known submission's function in-process; the grader tests grade them in a subprocess
through ``grade_folder`` and hold each result to its expectation with ``misgraded``.

expected.py sets ``EXPECTED`` (file -> expectation, see ``KEYS``) and ``GPU_ONLY``, and optionally ``HANGS`` (files
that hang on purpose: graded in a second call with a short ``--timeout``), ``EXERCISE`` (the exercise its files
are graded as, when the folder is not named after one) and ``SANDBOX`` (True: the files try to escape the grader's
sandbox; without one they would succeed and harm the checkout, so the folder is graded only where `gpucourse grade`
has the bubblewrap sandbox, and skipped with the reason elsewhere). An expectation's "status" and "message" may be
None (any) or a tuple (any one of them); its "cpu" and "gpu" keys override the others in that mode. A GPU_ONLY
folder cannot be graded in CPU mode (`gpucourse grade` refuses), so its "cpu" keys, where it has them, say what
``gpucourse.check`` says in CPU mode instead (the lesson's tests check those).
"""
from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUBMISSIONS = os.path.join(HERE, "submissions")
EXPECTED_FILE = "expected.py"
SETTINGS = {"EXPECTED", "GPU_ONLY", "HANGS", "EXERCISE", "SANDBOX"}  # expected.py's module-level names
KEYS = {"status", "message", "flags", "fails", "passes"}  # an expectation's keys, plus "cpu" and "gpu" overrides
REQUIRED = {"status", "message"}
HANG_TIMEOUT = 10  # seconds: the limit for HANGS, and a timeout must be killed soon after it
# Planted in the grader's environment of every call: a submission that finds it has read the grader's environment.
PLANTED_SECRET = ("GRADER_PLANTED_SECRET", "planted-by-the-tests-3f9c1a")


def right_submission(filename: str, exercise: str = "vector_add"):
    """The function defined by tests/submissions/<exercise>/<filename>."""
    return runpy.run_path(os.path.join(SUBMISSIONS, exercise, filename))[exercise]


def folders() -> list:
    """Every folder of known submissions."""
    return sorted(f for f in os.listdir(SUBMISSIONS) if os.path.isdir(os.path.join(SUBMISSIONS, f))
                  and f != "__pycache__")


def submission_files(folder: str) -> list:
    """The folder's submissions: every file but expected.py (and no __pycache__)."""
    path = os.path.join(SUBMISSIONS, folder)
    return sorted(f for f in os.listdir(path) if f != EXPECTED_FILE and os.path.isfile(os.path.join(path, f)))


def load_expected(folder: str) -> dict:
    """expected.py's settings, checked for typos: {"EXPECTED", "GPU_ONLY", "HANGS", "EXERCISE"}. Run as a file, not
    imported, so no __pycache__ is left beside the submissions."""
    path = os.path.join(SUBMISSIONS, folder, EXPECTED_FILE)
    if not os.path.exists(path):
        raise AssertionError(f"tests/submissions/{folder}/ has no {EXPECTED_FILE}")
    ns = {k: v for k, v in runpy.run_path(path).items() if not k.startswith("_")}
    unknown = set(ns) - SETTINGS
    assert not unknown, f"{folder}/{EXPECTED_FILE}: unknown settings {sorted(unknown)} (known: {sorted(SETTINGS)})"
    assert "EXPECTED" in ns and isinstance(ns.get("GPU_ONLY"), bool), \
        f"{folder}/{EXPECTED_FILE} must set EXPECTED and GPU_ONLY (True or False)"
    for name, entry in ns["EXPECTED"].items():
        for keys, where in ((entry, ""), (entry.get("cpu", {}), " cpu"), (entry.get("gpu", {}), " gpu")):
            allowed = KEYS | ({"cpu", "gpu"} if where == "" else set())
            assert set(keys) <= allowed, f"{folder}/{EXPECTED_FILE}: {name}{where}: unknown keys " \
                                         f"{sorted(set(keys) - allowed)} (known: {sorted(allowed)})"
        missing = REQUIRED - set(entry)
        assert not missing, f"{folder}/{EXPECTED_FILE}: {name} has no {sorted(missing)} (None: any)"
    hangs = tuple(ns.get("HANGS", ()))
    assert set(hangs) <= set(ns["EXPECTED"]), f"{folder}/{EXPECTED_FILE}: HANGS not in EXPECTED"
    return {"EXPECTED": ns["EXPECTED"], "GPU_ONLY": ns["GPU_ONLY"], "HANGS": hangs,
            "EXERCISE": ns.get("EXERCISE", folder), "SANDBOX": bool(ns.get("SANDBOX", False))}


def expectation(entry: dict, mode: str) -> dict:
    """An EXPECTED entry in ``mode`` ("cpu" or "gpu"): that mode's overrides applied."""
    merged = {k: v for k, v in entry.items() if k not in ("cpu", "gpu")}
    merged.update(entry.get(mode, {}))
    return merged


def _any_of(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def misgraded(result: dict, exp: dict) -> list:
    """Where ``result`` (a report's result: status, message, flags, checks) differs from ``exp``; [] if nowhere."""
    wrong = []
    if exp["status"] is not None and result["status"] not in _any_of(exp["status"]):
        wrong.append(f"status should be {' or '.join(_any_of(exp['status']))}")
    if exp["message"] is not None and not any(m in result["message"] for m in _any_of(exp["message"])):
        wrong.append(f"message should contain {' or '.join(repr(m) for m in _any_of(exp['message']))}")
    for flag in exp.get("flags", []):
        if not any(flag in f for f in result["flags"]):
            wrong.append(f"no flag contains {flag!r}")
    checks = {c["name"]: c["passed"] for c in result["checks"]}
    for key, want, verb in (("fails", False, "fail"), ("passes", True, "pass")):
        for case in exp.get(key, []):
            if case not in checks:
                wrong.append(f"case {case!r} was not graded (it should {verb})")
            elif checks[case] != want:
                wrong.append(f"case {case!r} should {verb}")
    return wrong


def describe(name: str, result: dict, problems: list) -> str:
    """One line for a misgraded submission: file, status, message, flags, and what is wrong."""
    return (f"{name}: {result['status']} {result['message']!r} flags={result['flags']}\n    -> "
            + "; ".join(problems))


def _cli(args: list, timeout: float) -> dict:
    env = dict(os.environ, **dict([PLANTED_SECRET]))
    proc = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def grade_folder(folder: str, out: str, timeout: float) -> dict:
    """Grade the folder's submissions through the real command line, each call with ``--jobs 2``: everything but
    HANGS in one call (``--timeout timeout``, with --json and --csv), HANGS in a second (``--timeout HANG_TIMEOUT``).
    Returns a JSON-able dict: "exercise", "paths" (of the first call, in order), "calls" (each call's returncode,
    stdout, stderr, report and paths), "csv" (the first call's CSV text), "seconds"."""
    settings = load_expected(folder)
    exercise, hangs = settings["EXERCISE"], settings["HANGS"]
    files = submission_files(folder)
    paths = [os.path.join(SUBMISSIONS, folder, f) for f in files if f not in hangs]
    calls = []
    t0 = time.perf_counter()
    for i, (group, limit) in enumerate(((paths, timeout), ([os.path.join(SUBMISSIONS, folder, f) for f in hangs],
                                                           HANG_TIMEOUT))):
        if not group:
            continue
        report_path, csv_path = os.path.join(out, f"{folder}-{i}.json"), os.path.join(out, f"{folder}-{i}.csv")
        call = _cli([exercise, *group, "--jobs", "2", "--timeout", str(limit), "--json", report_path, "--csv",
                     csv_path], timeout=1800 if i == 0 else 600)
        call["paths"], call["timeout"] = group, limit
        call["report"] = json.load(open(report_path)) if os.path.exists(report_path) else None
        call["csv"] = open(csv_path).read() if os.path.exists(csv_path) else None
        calls.append(call)
    return {"exercise": exercise, "paths": paths, "calls": calls, "seconds": time.perf_counter() - t0}
