"""The class summary after a batch (gpucourse/grading/summary.py, issue 35): per case how many failed and with what
messages (numbers replaced by N), flags, timeouts and crashes, the leaderboard's top; printed short after the batch
and written beside the gradebook. Reports are built by hand for the counting rules, and one small batch of known
submissions (tests/submissions/vector_add) is graded in CPU mode for the command line."""
from __future__ import annotations

import os
import subprocess
import sys

from gpucourse.grading import summary

HERE = os.path.dirname(os.path.abspath(__file__))
KNOWN = os.path.join(HERE, "submissions", "vector_add")
GPU_ENV = {"mode": "gpu", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "triton": "3.6.0", "fingerprint": "f"}


def _checks(*cases):
    return [{"name": n, "passed": d is None, "detail": d or "ok"} for n, d in cases]


def _result(path, status, message, checks=(), flags=(), ms=None):
    r = {"submission": path, "status": status, "score": 1.0 if status == "passed" else 0.0, "message": message,
         "checks": list(checks), "flags": list(flags), "seconds": 1.0, "timing": "t"}
    if ms is not None:
        r["perf"] = {"baseline": "the reference", "ratio": 1.0 / ms, "ms": ms, "q25_ms": ms * 0.99,
                     "q75_ms": ms * 1.01, "met": True}
    return r


def _report(results, env=None, standing=None):
    return {"exercise": "vector_add", "environment": env or {"mode": "cpu", "fingerprint": "f"},
            "isolation": {"level": "bubblewrap"}, "standing": standing or {"for_points": True, "why": ""},
            "results": results}


def test_numbers_are_replaced_so_one_problem_is_counted_once():
    assert summary.normalise("1066 of 1066 elements differ (first mismatches: [0] expected 2.54 got -3.5e-06)\nmore") \
        == "N of N elements differ (first mismatches: [N] expected N got N)"
    assert summary.normalise("wrong dtype: expected float32, got float16; n=513, at 0x7ffd12") == \
        "wrong dtype: expected float32, got float16; n=N, at N"
    assert summary.normalise("x" * 300).endswith("...") and len(summary.normalise("x" * 300)) == \
        summary.MESSAGE_CHARS


def test_counts_per_case_messages_flags_timeouts_and_crashes():
    report = _report([
        _result("/s/ann.py", "passed", "all 2 cases passed", _checks(("n=1", None), ("large", None))),
        _result("/s/bob.py", "failed", "1 of 2 cases failed; first: large: 3 of 4096 elements differ",
                _checks(("n=1", None), ("large", "3 of 4096 elements differ\nsizes drawn: n=4096"))),
        _result("/s/cat.py", "failed", "1 of 2 cases failed; first: large: 7 of 5000 elements differ",
                _checks(("n=1", None), ("large", "7 of 5000 elements differ")), flags=["12 MB of output"]),
        _result("/s/dan.py", "failed", "2 of 2 cases failed; first: n=1: wrong dtype: expected float32",
                _checks(("n=1", "wrong dtype: expected float32"), ("large", "wrong dtype: expected float32")),
                flags=["13 MB of output", "calls aten.add"]),
        _result("/s/eve.py", "timeout", "over the time limit of 10 s while running case 'n=1'",
                _checks(("n=1", "over the time limit"))),
        _result("/s/fay.py", "crashed", "the process died: killed by SIGSEGV"),
        _result("/s/gus.py", "crashed", "INTERNAL GRADER ERROR (not the submission's fault)",
                flags=["internal grader error"])])
    names = {f"/s/{n}.py": n for n in ("ann", "bob", "cat", "dan", "eve", "fay", "gus")}
    s = summary.summarize(report, names, [("hal", "missing", "nothing handed in")])
    assert s["graded"] == 7 and s["statuses"] == {"passed": 1, "failed": 3, "timeout": 1, "crashed": 2}
    assert [(c["name"], c["ran"], c["failed"]) for c in s["cases"]] == [("n=1", 5, 2), ("large", 4, 3)]
    # bob's and cat's differ only by their numbers: one message of two; a word's digits (float32) are kept
    assert s["cases"][1]["messages"] == [("N of N elements differ", 2), ("wrong dtype: expected float32", 1)]
    assert s["messages"][0] == ("N of N cases failed; first: large: N of N elements differ", 2)
    assert s["flags"] == [("N MB of output", 2), ("calls aten.add", 1), ("internal grader error", 1)]
    assert s["timeouts"] == [("eve", "over the time limit of 10 s while running case 'n=1'")]
    assert s["crashes"] == [("fay", "the process died: killed by SIGSEGV")]
    assert [who for who, _ in s["internal"]] == ["gus"]
    assert s["leaderboard"] == {"top": [], "note": "CPU mode: no speed was measured, so there is no ranking"}
    short = summary.text(s, "grades-summary.md")
    assert short.splitlines()[0] == ("summary: vector_add, 7 graded: 1 passed, 3 failed, 1 timeout, 2 crashed, "
                                     "1 not graded (missing)")
    assert "  case n=1: 2 of 5 failed; most: wrong dtype: expected float32 [1] (+1 other message)" in short
    assert "  case large: 3 of 4 failed; most: N of N elements differ [2] (+1 other message)" in short
    assert "  flag [2]: N MB of output" in short and "  timeouts: eve" in short and "  crashes: fay" in short
    assert "  internal grader errors: gus" in short and short.endswith("(full summary: grades-summary.md)")
    md = summary.markdown(s)
    assert "| large | 3 | 4 | N of N elements differ \\[2\\]; wrong dtype\\: expected float32 \\[1\\] |" in md
    assert "- eve (timeout): over the time limit" in md and "- hal (missing): nothing handed in" in md


def test_the_leaderboards_top_on_a_gpu_and_none_when_not_for_points():
    results = [_result(f"/s/{n}.py", "passed", "ok", ms=ms) for n, ms in
               [("slow", 3.0), ("fast", 1.0), ("mid", 2.0), ("last", 4.0)]]
    s = summary.summarize(_report(results, GPU_ENV), {r["submission"]: r["submission"][3:-3] for r in results})
    assert [(rank, who) for rank, who, _, _ in s["leaderboard"]["top"]] == [("1", "fast"), ("2", "mid"), ("3", "slow")]
    assert "  fastest: 1 fast 1.00x the reference; 2 mid 0.50x the reference; 3 slow 0.33x the reference" in \
        summary.text(s)
    assert "| 1 | fast | 1\\.00x the reference | 1\\.000 ms" in summary.markdown(s)
    feedback = summary.summarize(_report(results, GPU_ENV, {"for_points": False, "why": "graded at the process level"}))
    assert feedback["leaderboard"] == {"top": [], "note": "no ranking: graded at the process level"}


def test_names_and_messages_from_submissions_are_inert():
    hostile = '=HYPERLINK("x")<script>[a](http://e)'
    s = summary.summarize(_report([_result("/s/x.py", "crashed", "died: \x1b[2J" + hostile)]),
                          {"/s/x.py": "\x1b[2J" + hostile})
    md, short = summary.markdown(s), summary.text(s)
    assert "<script>" not in md and "](" not in md and "\\<script\\>" in md
    assert "\x1b" not in md + short
    assert "  crashes: \\x1b[2J=HYPERLINK" in short  # shown escaped, never sent to the terminal


def test_a_small_known_batch_summarised_after_grading(tmp_path):
    """Four known submissions graded in CPU mode (--jobs 2): the summary's counts are the known ones, printed after
    the report and written beside the gradebook (and to --summary PATH where given)."""
    book, where = tmp_path / "grades.csv", tmp_path / "class.md"
    files = [os.path.join(KNOWN, f) for f in ("right_basic.py", "wrong_dtype.py", "wrong_ignores_strides.py",
                                               "crash_after_a_failed_case.py")]
    proc = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", "vector_add", *files, "--jobs", "2",
                           "--gradebook", str(book), "--allow-process-isolation"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    err = proc.stderr[proc.stderr.index("summary: "):]
    assert err.splitlines()[0] == "summary: vector_add, 4 graded: 1 passed, 2 failed, 1 crashed"
    assert "  case n=1: 2 of 4 failed" in err  # wrong_dtype, and the crash's only case
    assert "  case strided x[::step]: 2 of 3 failed" in err  # wrong_dtype and wrong_ignores_strides
    assert "  case large: 1 of 3 failed; most: wrong dtype: expected float32, got float16 [1]" in err
    assert "  crashes: crash_after_a_failed_case" in err
    assert f"(full summary: {tmp_path / 'grades-summary.md'})" in err
    md = (tmp_path / "grades-summary.md").read_text()
    assert md.startswith("# Class summary: vector\\_add\n\n4 graded: 1 passed, 2 failed, 1 crashed.")
    assert "| strided x\\[\\:\\:step\\] | 2 | 3 | " in md
    assert "non\\-finite output where the reference is finite\\: N NaN\\, N Inf \\[1\\]" in md
    assert "- crash\\_after\\_a\\_failed\\_case (crashed): the process died" in md
    assert "CPU mode\\: no speed was measured" in md
    # Written where --summary says, from a report alone (no gradebook).
    proc = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", "vector_add", *files[:2], "--jobs", "2",
                           "--summary", str(where)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "summary: vector_add, 2 graded: 1 passed, 1 failed" in proc.stderr
    assert where.read_text().startswith("# Class summary: vector\\_add\n\n2 graded: 1 passed, 1 failed.")
