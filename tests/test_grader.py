"""The batch grader (`gpucourse grade`): its report's contract (JSON schema, CSV rows, exit status, which case
failed), usage errors, and the grader's internals with messages forged by hand.

The verdicts of the known submissions in tests/submissions/ are tests/test_known_submissions.py's; the contract tests
here read the same graded vector_add report (the ``known_grades`` fixture grades each folder once per test run).
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest
import torch

from gpucourse.grading.exercise import get
from gpucourse.grading import batch, checker, flags, grader, guards, process, protocol, report, sandbox, staging
from gpucourse.grading.outcome import Outcome
from gpucourse.grading import cli as grader_cli

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "submissions", "vector_add")


def _grade(args, **kw):
    return subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", *args], capture_output=True, text=True,
                          **kw)


@pytest.fixture(scope="module")
def graded(known_grades):
    """The first `gpucourse grade vector_add ...` call of tests/test_known_submissions.py (everything but the files
    that hang on purpose, with --json and --csv): its exit status, report, CSV text and paths in order."""
    call = known_grades("vector_add")["calls"][0]
    return call, call["report"], call["csv"], call["paths"]


def test_exit_status_zero_when_all_graded(graded):
    call, report, _, paths = graded
    assert call["returncode"] == 0, call["stderr"]
    assert [r["submission"] for r in report["results"]] == paths  # paths as given, in order


def test_json_schema_exactly(graded):
    _, report, _, _ = graded
    assert set(report) == {"exercise", "environment", "isolation", "standing", "results"}
    assert report["exercise"] == "vector_add"
    assert report["isolation"]["level"] in ("bubblewrap", "process") and report["isolation"]["detail"]
    env = report["environment"]
    for key in ("mode", "gpu", "driver", "torch", "triton", "fingerprint"):
        assert key in env
    assert env["mode"] in ("cpu", "gpu")
    for r in report["results"]:
        # "perf" only where a speed was measured (GPU, passed, a speed target): the leaderboard's numbers
        assert set(r) - {"perf"} == {"submission", "status", "score", "message", "checks", "flags", "seconds",
                                     "timing"}
        if "perf" in r:
            assert env["mode"] == "gpu" and r["status"] == "passed" and r["timing"].startswith(("alone", "beside"))
            assert {"baseline", "met", "suspicious", "text"} <= set(r["perf"]) <= {"baseline", "met", "suspicious",
                                                                                   "text", *grader.PERF_NUMBERS}
        assert r["timing"] == ("not timed (CPU mode)" if env["mode"] == "cpu" else r["timing"]) and r["timing"]
        assert r["status"] in ("passed", "failed", "error", "timeout", "crashed")
        assert isinstance(r["score"], float) and 0.0 <= r["score"] <= 1.0
        assert isinstance(r["message"], str) and r["message"]
        assert isinstance(r["flags"], list) and all(isinstance(f, str) for f in r["flags"])
        assert isinstance(r["seconds"], float) and r["seconds"] > 0
        for c in r["checks"]:
            # "where" only on a failed case whose output has the right shape (report.where_field)
            assert set(c) - {"where"} == {"name", "passed", "detail"}
            assert isinstance(c["name"], str) and isinstance(c["passed"], bool) and isinstance(c["detail"], str)
            if "where" in c:
                assert not c["passed"] and set(c["where"]) == WHERE_KEYS
    assert any("where" in c for r in report["results"] for c in r["checks"])


WHERE_KEYS = {"shape", "slice", "block", "n_right", "n_wrong", "n_never", "n_past", "codes", "past_end"}


def test_a_failed_cases_map_in_the_report_counts_what_its_text_says(graded):
    """The never-written tail of each case (wrong_unwritten_tail.py): the report's map counts the elements the
    checker's text counts, ends in never-written cells, and holds at most report.WHERE_SIDE**2 cells."""
    _, report_, _, _ = graded
    (r,) = [r for r in report_["results"] if r["submission"].endswith("wrong_unwritten_tail.py")]
    failed = [c for c in r["checks"] if not c["passed"]]
    assert failed and all("where" in c for c in failed)
    for c in failed:
        never, numel = map(int, re.search(r"elements never written: (\d+) of (\d+)", c["detail"]).groups())
        w = c["where"]
        assert (w["shape"], w["slice"], w["n_right"], w["n_wrong"], w["n_never"]) == ([numel], [], numel - never, 0,
                                                                                       never)
        (row,) = w["codes"]
        assert len(row) == -(-numel // w["block"][0]) <= report.WHERE_SIDE ** 2 and set(row) <= {0, 2}
        assert row[-1] == 2 and row[0] == 0  # compare.NEVER at the tail, compare.RIGHT before it


def test_writes_past_the_end_are_in_the_reports_map(graded):
    """The worker reads the guard band after an output the submission allocated (its own memory, sent without the
    band), so the batch report's map counts what the text counts: wrong_unmasked_empty_like.py stores every lane of
    its one block, from the end of its output on."""
    _, report_, _, _ = graded
    (r,) = [r for r in report_["results"] if r["submission"].endswith("wrong_unmasked_empty_like.py")]
    past = [c for c in r["checks"] if "past the end" in c["detail"]]
    assert len(past) == len(r["checks"])
    for c in past:
        n = int(re.search(r"wrote (\d+) element\(s\) past the end", c["detail"]).group(1))
        assert c["where"]["n_past"] == n > 0, c
        assert c["where"]["past_end"] == list(range(min(n, report.WHERE_PAST)))


def test_failed_checks_say_which_case(graded):
    _, report, _, _ = graded
    (r,) = [r for r in report["results"] if r["submission"].endswith("wrong_unwritten_tail.py")]
    names = [c["name"] for c in r["checks"]]
    assert names == ["n=1", "n just below a power of two", "n just above a power of two", "n not a power of two",
                     "strided x[::step]", "large"]
    tail = next(c for c in r["checks"] if c["name"] == "n just below a power of two")
    # The size is drawn for the run and said in the detail; the grid of n // 256 programs leaves the rest unwritten.
    n = int(re.search(r"sizes drawn for this run: n=(\d+)", tail["detail"]).group(1))
    assert not tail["passed"] and f"the tail from index {n // 256 * 256}" in tail["detail"], tail["detail"]
    assert any(n == 2**k - d for k in range(9, 13) for d in (1, 2, 3)), n


def test_csv_one_row_per_submission(graded):
    _, report, csv_text, paths = graded
    rows = list(csv.DictReader(io.StringIO(csv_text, newline="")))
    assert [r["submission"] for r in rows] == paths
    for row, r in zip(rows, report["results"]):
        assert row["status"] == r["status"]
        assert float(row["score"]) == pytest.approx(r["score"], abs=1e-4)
        assert row["message"] == r["message"]
        assert row["torch"] == report["environment"]["torch"] and row["fingerprint"]
        assert row["isolation"] == report["isolation"]["level"] and row["timing"] == r["timing"]
        assert row["gpu"] and "triton" in row


def test_progress_line_per_submission_on_stderr(graded):
    """A line on stderr as each submission finishes ("[k/N] path  status score  (seconds)"), k counting 1..N, each
    submission once; stdout keeps only the report."""
    call, report, _, paths = graded
    lines = re.findall(r"^\[\s*(\d+)/(\d+)\] (\S+)  (\w+) +(\d\.\d\d)  \((\d+\.\d) s\)", call["stderr"], re.M)
    assert [int(k) for k, *_ in lines] == list(range(1, len(paths) + 1)), call["stderr"][-3000:]
    assert {int(n) for _, n, *_ in lines} == {len(paths)}
    assert sorted(p for _, _, p, *_ in lines) == sorted(paths)  # each submission once
    by_path = {r["submission"]: r for r in report["results"]}
    for _, _, path, status, score, _ in lines:
        assert status == by_path[path]["status"] and float(score) == pytest.approx(by_path[path]["score"], abs=0.01)
    assert not re.search(r"^\[\s*\d+/\d+\]", call["stdout"], re.M)


def test_crashed_message_says_what_failed_before_the_crash(graded):
    """A crash after a failed case: the message (JSON, text report, CSV) names the signal and that case's problem,
    not only "killed by SIGABRT"."""
    call, report, csv_text, _ = graded
    (r,) = [r for r in report["results"] if r["submission"].endswith("crash_after_a_failed_case.py")]
    assert r["status"] == "crashed"
    assert r["message"].startswith("the process died: killed by SIGABRT after case 'n=1' failed: 1 of 1 elements "
                                   "differ"), r["message"]
    (row,) = [row for row in csv.DictReader(io.StringIO(csv_text, newline=""))
              if row["submission"] == r["submission"]]
    assert row["message"] == r["message"]
    assert f"crashed  0.00  {r['message']}" in call["stdout"]
    (plain,) = [r for r in report["results"] if r["submission"].endswith("crash_abort.py")]  # nothing failed before
    assert plain["message"] == "the process died: killed by SIGABRT"


def test_first_failure_is_the_first_failed_checks_first_line():
    checks = [{"name": "n=1", "passed": True, "detail": "ok"},
              {"name": "n=1023", "passed": False, "detail": "wrote 4095 elements past the end\nhint: mask the stores"},
              {"name": "n=1025", "passed": False, "detail": "elements differ"}]
    assert grader.first_failure(checks) == "case 'n=1023' failed: wrote 4095 elements past the end"
    assert grader.first_failure(checks[:1]) == ""
    assert grader.first_failure([{"name": "a", "passed": False, "detail": "x" * 1000}]).endswith("x...")


def test_help_lists_the_exercises():
    proc = _grade(["--help"])
    assert proc.returncode == 0
    from gpucourse.grading.exercise import all_ids
    listed = proc.stdout.split("exercises:", 1)[1].split("statuses:", 1)[0]
    assert "vector_add" in listed and "fp8_matmul" in listed
    assert sorted(re.findall(r"\w+", listed)) == all_ids()


def test_a_folder_grades_its_py_and_ipynb_files(tmp_path):
    """A folder as SUBMISSION: its .py and .ipynb files, sorted, subfolders included; expected.py, __pycache__ and
    hidden files are left out."""
    folder = tmp_path / "subs"
    (folder / "bob").mkdir(parents=True)
    (folder / "__pycache__").mkdir()
    (folder / ".ipynb_checkpoints").mkdir()
    shutil.copy(os.path.join(FOLDER, "right_basic.py"), folder / "alice.py")
    shutil.copy(os.path.join(FOLDER, "wrong_dtype.py"), folder / "bob" / "sub.py")
    for skipped in ("expected.py", ".hidden.py", "__pycache__/alice.py", ".ipynb_checkpoints/alice.py",
                    "notes.txt"):
        shutil.copy(os.path.join(FOLDER, "error_syntax.py"), folder / skipped)
    assert grader_cli.folder_submissions(str(folder)) == [str(folder / "alice.py"), str(folder / "bob" / "sub.py")]
    report_path = tmp_path / "r.json"
    proc = _grade(["vector_add", str(folder), "--jobs", "2", "--timeout", "120", "--json", str(report_path)],
                  timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(report_path.read_text())["results"]
    assert [(r["submission"], r["status"]) for r in results] == [(str(folder / "alice.py"), "passed"),
                                                                 (str(folder / "bob" / "sub.py"), "failed")]
    assert "wrong dtype" in results[1]["message"]
    assert len(re.findall(r"^\[\d/2\] ", proc.stderr, re.M)) == 2


def test_an_empty_folder_is_a_usage_error(tmp_path):
    (tmp_path / "expected.py").write_text("EXPECTED = {}\n")
    proc = _grade(["vector_add", str(tmp_path)])
    assert proc.returncode == 2
    assert "no .py or .ipynb submissions" in proc.stderr


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
    assert "1 when the grader itself failed" in proc.stdout  # the exit status main() returns on a grader bug


# --- judged exercises (Exercise.judge): the judge runs inside the isolated worker --------------------------------


def test_judging_snapshot_undoes_what_a_submission_patches():
    """In-process, the worker's defence: snapshot, patch what fix_training_loop's judge relies on, restore."""
    from torch.overrides import TorchFunctionMode

    from gpucourse import syncs
    from gpucourse.lessons.l02_async_pipeline.exercises import fix_training_loop
    from gpucourse.grading import judging

    originals = (torch.allclose, syncs.detect, dict(syncs.READS), syncs.classify.__code__, fix_training_loop.RTOL)
    snap = judging.Snapshot()
    handle = None
    try:
        torch.allclose = lambda *a, **k: True
        syncs.detect = None
        syncs.READS.clear()
        syncs.classify.__code__ = (lambda func, args, kwargs, emulate: None).__code__
        syncs.SyncLog.__len__ = lambda self: 0
        fix_training_loop.RTOL = float("inf")
        handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o * 0)
        TorchFunctionMode().__enter__()
        undone = snap.restore()
    finally:
        if handle is not None:
            handle.remove()
        torch.allclose, syncs.detect, syncs.classify.__code__, fix_training_loop.RTOL = (
            originals[0], originals[1], originals[3], originals[4])
        syncs.READS.update(originals[2])
        if "__len__" in vars(syncs.SyncLog):
            del syncs.SyncLog.__len__
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
    assert (torch.allclose, syncs.detect, syncs.classify.__code__, fix_training_loop.RTOL) == (
        originals[0], originals[1], originals[3], originals[4])
    assert dict(syncs.READS) == originals[2] and "__len__" not in vars(syncs.SyncLog)
    for what in ("torch.allclose", "gpucourse.syncs.detect", "the contents of gpucourse.syncs.READS",
                 "the code of gpucourse.syncs.classify", "gpucourse.syncs.SyncLog.__len__ (added)",
                 "gpucourse.lessons.l02_async_pipeline.exercises.fix_training_loop.RTOL", "_global_forward_hooks",
                 "a TorchFunctionMode left on torch's stack"):
        assert any(what in u for u in undone), (what, undone)
    assert snap.restore() == []


def test_judging_sealed_call_returns_plain_values_and_restores():
    from gpucourse.grading import judging

    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return True if getattr(func, "__name__", "") == "allclose" else super().__torch_function__(
                func, types, args, kwargs)

    class Anything(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    class Pretender:
        __class__ = property(lambda self: float)

    allclose = torch.allclose

    def fn():
        torch.allclose = lambda *a, **k: True  # patched during the call: undone when it returns
        return {"t": torch.zeros(2).as_subclass(Liar), "s": Anything("memory"), "p": Pretender(), "n": [1, (2.5,)]}

    changed, threads = [], []
    out = judging.sealed(fn, changed, threads)()
    assert torch.allclose is allclose and any("torch.allclose" in c for c in changed) and threads == []
    assert type(out) is dict and type(out["t"]) is torch.Tensor and not torch.allclose(out["t"], torch.ones(2))
    assert type(out["s"]) is str and out["s"] != "compute"
    assert not isinstance(out["p"], float) and "Pretender" in repr(out["p"])
    assert out["n"] == [1, (2.5,)]


WORKBOOK = os.path.join(os.path.dirname(__file__), "submissions", "choose_tile", "right_whole_workbook.ipynb")


def test_a_whole_workbooks_shipped_cells_raise_no_flag_its_own_cells_do(tmp_path):
    """Issue 39: the cells the course ships in a workbook import the course's modules; a learner's whole workbook
    gets no flag from them, while a cell of the learner's own that imports the lessons is flagged and is an error."""
    learners = [i for i, c in enumerate(json.loads(open(WORKBOOK).read())["cells"]) if c["cell_type"] == "code"
                and flags._cell_key("".join(c["source"])) not in grader.shipped_cells()]
    assert learners == [5, 8, 11], (
        f"{WORKBOOK} is exercises/06_tensor_cores.ipynb with a learner's cells 5, 8 and 11: after the workbook "
        f"changes, rebuild it from the new one (cells {learners} are not shipped)")
    assert grader.static_flags(grader.learner_source(WORKBOOK)) == []
    assert grader.course_code_used(grader.learner_source(WORKBOOK)) == []
    nb = json.loads(open(WORKBOOK).read())
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                        "source": ["from gpucourse.lessons.l06_tensor_cores.waves import gemm_waves\n"]})
    own = tmp_path / "mine.ipynb"
    own.write_text(json.dumps(nb))
    source = grader.learner_source(str(own))
    assert grader.static_flags(source) == [
        "source imports the course's lessons (the instructor's own kernels and helpers)"]
    (used,) = grader.course_code_used(source)  # the line in the learner's own cells (the filled-in stubs first)
    assert re.fullmatch(r"line \d+: from gpucourse\.lessons\.l06_tensor_cores\.waves import gemm_waves", used)


def test_a_workbook_saved_as_a_script_is_read_like_the_workbook(tmp_path):
    """Issue 39: the same whole workbook saved as a script (nbconvert's ``# In[ ]:`` chunks with the markdown as
    comments, or jupytext's ``# %%``) raises no flag from the cells the course ships; a chunk of the learner's own
    that imports the lessons is flagged and named by its line in the script; a plain script is read whole."""
    from nbconvert.exporters import ScriptExporter

    body, _ = ScriptExporter().from_filename(WORKBOOK)
    cells = json.loads(open(WORKBOOK).read())["cells"]
    percent = "".join(("# %%\n" + "".join(c["source"]) if c["cell_type"] == "code" else
                       "# %% [markdown]\n" + "".join("# " + line for line in "".join(c["source"]).splitlines(True)))
                      + "\n\n" for c in cells)
    mine = "\n# In[ ]:\n\n\nfrom gpucourse.lessons.l06_tensor_cores.waves import gemm_waves\n"
    for name, text in (("nbconvert.py", body), ("percent.py", percent)):
        path = tmp_path / name
        path.write_text(text)
        assert grader.static_flags(text), name  # read whole, the shipped cells would be flagged
        assert grader.static_flags(grader.learner_source(str(path))) == [], name
        assert grader.course_code_used(grader.learner_source(str(path))) == [], name
        path.write_text(text + mine)
        source = grader.learner_source(str(path))
        assert grader.static_flags(source) == [
            "source imports the course's lessons (the instructor's own kernels and helpers)"], name
        (used,) = grader.course_code_used(source)
        line = (text + mine).splitlines().index("from gpucourse.lessons.l06_tensor_cores.waves import gemm_waves") + 1
        assert used == f"line {line}: from gpucourse.lessons.l06_tensor_cores.waves import gemm_waves", name
    plain = tmp_path / "plain.py"
    plain.write_text("from gpucourse.lessons.l06_tensor_cores.waves import gemm_waves\n")
    assert grader.course_code_used(grader.learner_source(str(plain))) == [
        "line 1: from gpucourse.lessons.l06_tensor_cores.waves import gemm_waves"]


def test_course_code_used_reads_imports_not_text():
    assert grader.course_code_used("import torch\n# gpucourse.lessons is off limits\n") == []
    assert grader.course_code_used("from gpucourse import lessons\n") == ["line 1: from gpucourse import lessons"]
    assert grader.course_code_used("import importlib\nk = importlib.import_module('gpucourse.lessons.l07_quantization"
                                   ".kernels')\n") == [
        "line 2: k = importlib.import_module('gpucourse.lessons.l07_quantization.kernels')"]
    # the exercise specs are the grader's (reaching into them is flagged as such), not the instructor's answer
    assert grader.course_code_used("import gpucourse.lessons.l02_async_pipeline.exercises.fix_training_loop\n") == []


def test_course_code_makes_a_verdict_an_error_naming_it():
    ex = get("quantize_per_channel")
    r = grader.Result(submission="s.py", status="passed", score=1.0, message="all 6 cases passed")
    report.course_code(r, ex, ["line 3: from gpucourse.lessons.l07_quantization.quant import qmax"])
    assert (r.status, r.score) == ("error", 0.0)
    assert r.message == ("quantize_per_channel used the course's own code: it imports the course's lessons (the "
                         "instructor's kernels and helpers) at line 3: from gpucourse.lessons.l07_quantization.quant "
                         "import qmax; an answer computed by them is not yours: write your own")


def test_static_flags():
    assert grader.static_flags("import gc\nfor o in gc.get_objects(): pass") == [
        "source walks the garbage collector (gc.get_objects/referrers)"]
    assert grader.static_flags("def vector_add(x, y):\n    return x + y\n") == []
    assert any("ctypes" in f for f in grader.static_flags("import ctypes"))


def test_patching_a_course_helper_is_flagged_for_any_lesson_module_the_source_imports():
    """The helpers a judge relies on: the kit's (syncs, roofline, asyncqueue) by name, and whatever lesson module
    the source imports, under the name it binds; no lesson module is named in flags.py."""
    helpers = "source monkeypatches the course's helpers (what judges rely on)"
    for source in ("from gpucourse.lessons.l02_async_pipeline import trainloop\ntrainloop.train_fixed = None\n",
                   "import gpucourse.lessons.l06_tensor_cores.waves as w\nw.gemm_waves = None\n",
                   "from gpucourse.lessons.l10_training_scale import (budget,\n    ring as r)\nr.ring_all_reduce = 1\n",
                   "from gpucourse import syncs\nsyncs.detect = None\n"):
        assert helpers in grader.static_flags(source), source
    for source in ("trainloop = make_loop()\ntrainloop.steps = 3\n",  # a name of its own, not the course's module
                   "from gpucourse.lessons.l02_async_pipeline import trainloop\nsteps = trainloop.STEPS\n"):
        assert helpers not in grader.static_flags(source), source
    lessons = os.path.join(os.path.dirname(os.path.dirname(flags.__file__)), "lessons")
    lesson_modules = {os.path.splitext(f)[0] for folder, _, files in os.walk(lessons) if "exercises" not in folder
                      for f in files if f.endswith(".py") and not f.startswith("_")}
    patterns = " ".join([pattern for pattern, _ in flags.SUSPICIOUS] + list(flags.JUDGE_HELPERS))
    assert "trainloop" in lesson_modules
    assert not [m for m in lesson_modules if re.search(rf"\b{m}\b", patterns)], patterns


# --- the grader's side of the channel, with messages forged by hand ---------------------------------------------


def _result_msg(**fields) -> dict:
    """A "result" message as the worker sends it for a call with two input buffers; ``fields`` replace its own."""
    msg = {"type": "result", "index": 0, "out": {"tensor": torch.zeros(3), "device": "cpu"}, "out2": None,
           "buffers_after": [torch.zeros(4), None], "triton_launches": {"add_kernel": 1}, "cuda_launches": {},
           "ops": {"aten.add": 2}, "overruns": []}
    msg.update(fields)
    return msg


def test_forged_result_fields_are_malformed_not_a_grader_error():
    outcome = grader._outcome(_result_msg(), 2)
    assert isinstance(outcome, Outcome) and outcome.triton_launches == {"add_kernel": 1}
    assert outcome["triton_launches"] == {"add_kernel": 1} and outcome["ops"] == {"aten.add": 2}  # as evaluate reads
    assert outcome.get("uses") == {} and outcome.get("no such field", "none") == "none"
    with pytest.raises(KeyError):
        outcome["no such field"]
    missing_out = _result_msg()
    del missing_out["out"]
    forged = [missing_out, _result_msg(out={"number": "x"}), _result_msg(triton_launches={"add_kernel": "many"}),
              _result_msg(cuda_launches=[1, 2]), _result_msg(ops={"aten.add": "x"}),
              _result_msg(buffers_after=torch.zeros(3)), _result_msg(out2={"number": torch.zeros(2)}),
              _result_msg(past_end=[guards.GUARD]), _result_msg(past_end=[-1]), _result_msg(past_end=[3, 1]),
              _result_msg(past_end=[1, 1]), _result_msg(past_end=[True]), _result_msg(past_end=torch.zeros(2)),
              _result_msg(past_end=list(range(guards.GUARD + 1)))]
    assert grader._outcome(_result_msg(past_end=[0, 2]), 2).past_end.tolist() == [0, 2]
    assert grader._outcome(_result_msg(past_end=[]), 2).past_end is None
    for msg in forged:
        with pytest.raises(protocol.Malformed):
            grader._outcome(msg, 2)


def test_forged_result_in_the_conversation_is_blamed_on_the_channel():
    """A fake worker that answers the first case with a forged message carrying the right nonce: _converse raises
    Malformed (grade_one: status error, flagged "tampered with the grader's channel"), not ValueError (grade:
    "INTERNAL GRADER ERROR")."""
    ex = get("vector_add")
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()

    def fake_worker():
        nonce = protocol.recv(to_r)["nonce"]
        protocol.send(from_w, {"type": "ready", "nonce": nonce})
        case = protocol.recv(to_r)
        protocol.send(from_w, {"type": "result", "nonce": nonce, "index": case["index"], "out": {"number": "x"},
                               "buffers_after": [None, None]})

    thread = threading.Thread(target=fake_worker, daemon=True)
    thread.start()
    result = grader.Result(submission="forged.py", status="error", score=0.0, message="")
    try:
        with pytest.raises(protocol.Malformed):
            grader._converse(ex, "forged.py", result, checker.new_seed(), "n0nce", to_w, from_r,
                             time.monotonic() + 60)
    finally:
        thread.join(timeout=10)
        for fd in (to_r, to_w, from_r, from_w):
            os.close(fd)


def _converse_with(reply) -> None:
    """_converse on vector_add against a fake worker that says ready, then answers the first case with
    ``reply(nonce, case_msg)``; whatever _converse raises propagates."""
    ex = get("vector_add")
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()

    def fake_worker():
        nonce = protocol.recv(to_r)["nonce"]
        protocol.send(from_w, {"type": "ready", "nonce": nonce})
        protocol.send(from_w, reply(nonce, protocol.recv(to_r)))

    thread = threading.Thread(target=fake_worker, daemon=True)
    thread.start()
    result = grader.Result(submission="forged.py", status="error", score=0.0, message="")
    try:
        grader._converse(ex, "forged.py", result, checker.new_seed(), "n0nce", to_w, from_r, time.monotonic() + 60)
    finally:
        thread.join(timeout=10)
        for fd in (to_r, to_w, from_r, from_w):
            os.close(fd)


@pytest.mark.parametrize("forged, says", [
    # issue 39: a tensor where the case's number goes made `!=` a tensor and the grader raised "Boolean value of
    # Tensor with more than one value is ambiguous" (an INTERNAL GRADER ERROR, exit 1 for the batch)
    (lambda n, case: {"type": "result", "nonce": n, "index": torch.ones(3)}, "a reply for case 'Tensor'"),
    (lambda n, case: {"type": "result", "nonce": n, "index": case["index"] + 1}, "a reply for case 1 while case 0"),
    (lambda n, case: {"type": "result", "nonce": n, "index": True}, "a reply for case 'bool'"),
    (lambda n, case: {"type": "result", "nonce": torch.ones(3), "index": 0}, "expected result/raised, got 'result'"),
    (lambda n, case: {"type": torch.ones(3), "nonce": n, "index": 0}, "expected result/raised, got 'Tensor'"),
    (lambda n, case: _result_msg(nonce=n, out={"tensor": torch.zeros(3).to_sparse()}), "not a dense tensor"),
])
def test_forged_index_nonce_or_type_is_tampering_not_a_grader_error(forged, says):
    with pytest.raises(protocol.Malformed, match=re.escape(says)):
        _converse_with(forged)


def test_forged_message_is_reported_as_tampering(tmp_path, monkeypatch):
    """grade_prepared turns the Malformed of a forged reply into the submission's error, named as tampering."""
    def fake_converse(ex, path, result, *args, **kwargs):
        raise protocol.Malformed("a reply for case 'Tensor' while case 0 ran")

    monkeypatch.setattr(grader, "_converse", fake_converse)
    path = tmp_path / "s.py"
    path.write_text("def vector_add(x, y):\n    return x + y\n")
    r = grader.grade_one(get("vector_add"), str(path), 60, isolation=sandbox.detect("process"))
    assert r.status == "error" and r.score == 0.0
    assert r.message.startswith("tampering with the grader's channel: the worker sent a message it never sends (a "
                                "reply for case 'Tensor' while case 0 ran)")
    assert "tampered with the grader's channel" in r.flags and "internal grader error" not in r.flags


def test_raised_reply_with_forged_fields_is_still_the_submissions_error():
    """A "raised" reply whose not_implemented/exc_type are tensors (truthiness raised before issue 39's fix)."""
    ex = get("vector_add")
    r = grader.Result(submission="s.py", status="error", score=0.0, message="")
    grader._raised(ex, ex.cases[0], {"type": "raised", "index": 0, "not_implemented": torch.ones(3),
                                     "exc_type": torch.ones(3), "traceback": "ValueError: boom"}, r)
    assert r.status == "error" and r.message == f"vector_add raised ValueError: boom (case {ex.cases[0].name!r})"


def test_tampered_flag_is_the_workers_isinstance_not_the_exception_name():
    ex = get("fix_training_loop")
    own_class = {"type": "raised", "index": 0, "exc_type": "Tampered",
                 "traceback": "Traceback (most recent call last):\nTampered: a class the submission defined"}
    r = grader.Result(submission="s.py", status="error", score=0.0, message="")
    grader._raised(ex, ex.cases[0], own_class, r)
    assert "tampered" not in r.message and r.flags == [] and "raised Tampered" in r.message
    r = grader.Result(submission="s.py", status="error", score=0.0, message="")
    grader._raised(ex, ex.cases[0], dict(own_class, tampered=True), r)
    assert "tampered with the judge" in r.message and r.flags == ["tampered with the judge"]


def test_not_implemented_message_is_the_checkers():
    ex = get("vector_add")
    r = grader.Result(submission="s.py", status="error", score=0.0, message="")
    grader._raised(ex, ex.cases[0], {"type": "raised", "not_implemented": True, "exc_type": "NotImplementedError"}, r)
    assert r.message.startswith(f"vector_add {checker.NOT_IMPLEMENTED}")


def test_sparse_output_is_described_by_the_worker():
    from gpucourse.grading import worker

    sent = worker._plain(torch.ones(3).to_sparse(), torch)
    out, _ = grader._unpack(sent)
    assert grader._meta_problem(torch.ones(3), out) == [sent["problem"]] and "sparse_coo" in sent["problem"]
    assert "meta device" in worker._plain(torch.empty(3, device="meta"), torch)["problem"]


def test_worker_env_is_an_allow_list_with_its_own_caches(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADER_API_TOKEN", "secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("GPUCOURSE_CACHE", str(tmp_path / "shared"))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "shared_ext"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "shared_triton"))
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    one, two = grader._worker_env(None, str(tmp_path / "one")), grader._worker_env("1", str(tmp_path / "two"))
    for env, tmp in ((one, tmp_path / "one"), (two, tmp_path / "two")):
        assert "secret" not in env.values() and "GRADER_API_TOKEN" not in env
        assert env["PATH"] == os.environ["PATH"] and env["LC_ALL"] == "C.UTF-8"
        assert env["PYTHONPATH"].split(os.pathsep)[0] == os.path.dirname(HERE)  # gpucourse importable
        for key in ("GPUCOURSE_CACHE", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TRITON_HOME",
                    "TORCHINDUCTOR_CACHE_DIR", "HOME", "XDG_CACHE_HOME"):
            assert env[key].startswith(str(tmp)), key
    assert one["GPUCOURSE_CACHE"] != two["GPUCOURSE_CACHE"] and two["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_raised_message_is_the_exception_line_not_the_tracebacks_last_line():
    cuda = ("Traceback (most recent call last):\n  File \"sub.py\", line 3, in sum_many\n    out = ext.many(ts)\n"
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call.\n"
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
    assert checker.exception_line(cuda, "AcceleratorError") == \
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    nvcc = ("Traceback (most recent call last):\n  File \"x.py\", line 9, in block_sum\n"
            "gpucourse.cuda_build.CudaCompileError: building block_sum failed:\n\n"
            "cuda.cu(12): error: identifier \"total\" is undefined\n"
            "1 error detected in the compilation of \"cuda.cu\".\n")
    assert checker.exception_line(nvcc, "CudaCompileError") == \
        "gpucourse.cuda_build.CudaCompileError: building block_sum failed: cuda.cu(12): error: identifier \"total\" " \
        "is undefined"
    assert checker.exception_line("Traceback:\nIndexError: list index out of range", "IndexError") == \
        "IndexError: list index out of range"
    assert checker.exception_line("no exception line here", "ValueError") == "no exception line here"


def test_a_message_that_would_take_long_to_decode_is_refused_before_decoding():
    """Torch's weights-only unpickler is pure Python: a message of millions of tiny objects would be decoded for
    minutes, past --timeout. The channel refuses a pickle over MAX_PICKLE bytes (its tensors' data are separate
    records), compressed records and too many records before decoding, so decoding ends within a second or two. Timed in
    this process's CPU seconds, which a busy machine does not stretch (wall-clock seconds failed under load)."""
    slow = protocol.encode({"type": "result", "junk": list(range(2_000_000))})
    t0 = time.process_time()
    with pytest.raises(protocol.Malformed, match="a pickle of"):
        protocol.decode(slow[protocol.HEADER.size:])
    assert time.process_time() - t0 < 1.0
    many = protocol.encode({"type": "result", "t": [torch.zeros(1) for _ in range(protocol.MAX_RECORDS + 1)]})
    with pytest.raises(protocol.Malformed, match="records in one message"):
        protocol.decode(many[protocol.HEADER.size:])
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\0" * 100)
    with pytest.raises(protocol.Malformed, match="compressed record"):
        protocol.decode(buf.getvalue())
    with pytest.raises(protocol.Malformed, match="not a torch.save archive"):
        protocol.decode(b"not a zip at all")
    # The largest pickle allowed, made of the cheapest objects to send and the dearest to decode, decodes fast.
    worst = protocol.encode({"type": "result", "junk": [[] for _ in range(protocol.MAX_PICKLE // 6)]})
    assert len(worst) < protocol.MAX_PICKLE + 4096
    t0 = time.process_time()
    protocol.decode(worst[protocol.HEADER.size:])
    assert time.process_time() - t0 < 5.0  # about 0.3 s on an idle 2-core machine


def test_the_default_time_limit_leaves_room_for_the_interpreter(monkeypatch):
    """Issue 39: in CPU mode a right kernel of small blocks takes 10 s idle and 20-46 s on a loaded machine, so the
    limit an instructor does not set is 180 s there and 60 s on a GPU; the command line says both."""
    monkeypatch.setattr(grader._device, "on_gpu", lambda: False)
    assert grader.default_timeout() == grader.CPU_MODE_TIMEOUT == 180
    monkeypatch.setattr(grader._device, "on_gpu", lambda: True)
    assert grader.default_timeout() == grader.DEFAULT_TIMEOUT == 60
    assert "180 in CPU mode" in " ".join(grader_cli._parser().format_help().split())


def test_a_message_decoded_past_the_deadline_is_a_timeout():
    """recv honours the deadline through decoding too: a message that arrives in time but is decoded after the
    deadline is a timeout, not a verdict."""
    r, w = os.pipe()
    try:
        protocol.send(w, {"type": "ready", "nonce": "n"})
        with pytest.raises(protocol.Timeout):
            protocol.decode(protocol.encode({"type": "x"})[protocol.HEADER.size:], time.monotonic() - 1)
        assert protocol.recv(r, time.monotonic() + 30)["type"] == "ready"
    finally:
        os.close(r)
        os.close(w)


def test_timing_is_said_for_every_result_in_cpu_mode(graded):
    _, report, _, _ = graded
    if report["environment"]["mode"] == "cpu":
        assert {r["timing"] for r in report["results"]} == {"not timed (CPU mode)"}


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_is_a_bar_under_the_lines():
    """On a terminal: a bar from the start ("grading 3 submissions... [....] 0/3"), each finished submission's line
    written over the bar and the bar drawn again under it with the time left, cleared after the last; in a log, the
    lines alone. Paths are shown with control characters escaped."""
    term = _Terminal()
    bar = grader._Progress(3, True, term)
    assert term.getvalue().startswith("grading 3 submissions... [" + "." * grader._Progress.WIDTH + "] 0/3 done")
    time.sleep(2.5 * grader._Progress.TICK_S)  # a long first submission: the bar's clock still moves
    ticks = term.getvalue().count("\r\x1b[K")
    assert ticks >= 1 and re.search(r"\r\x1b\[K[^\r]*\] 0/3 done, [1-9]\d* s$", term.getvalue()), \
        repr(term.getvalue())
    term.seek(0)
    term.truncate()
    for i, status in enumerate(["passed", "crashed", "passed"]):
        bar.update(grader.Result(submission=f"s{i}\x1b[2J.py", status=status, score=1.0 if status == "passed"
                                 else 0.0, message="the process died: killed by SIGABRT after case 'n=1' failed: x",
                                 seconds=1.0))
    out = term.getvalue()
    assert out.count("\r\x1b[K") >= 3 and "\x1b[2J" not in out and "s0\\x1b[2J.py" in out
    assert re.search(r"\r\x1b\[K\[1/3\] s0\\x1b\[2J\.py  passed   1\.00  \(1\.0 s\)\n\[#{10}\.{20}\] 1/3 done, \d+ s, "
                     r"about \d+ s left\r", out), repr(out)
    assert "[2/3] s1\\x1b[2J.py  crashed  0.00  (1.0 s)  the process died: killed by SIGABRT after case 'n=1'" in out
    assert out.endswith("[3/3] s2\\x1b[2J.py  passed   1.00  (1.0 s)\n")  # no bar left behind
    time.sleep(1.5 * grader._Progress.TICK_S)
    assert term.getvalue() == out  # the clock stopped with the last submission
    log = io.StringIO()
    plain = grader._Progress(2, True, log)
    plain.update(grader.Result(submission="a.py", status="passed", score=1.0, message="ok", seconds=2.0))
    assert log.getvalue() == "[1/2] a.py  passed   1.00  (2.0 s)\n"
    quiet = io.StringIO()
    grader._Progress(2, False, quiet).update(grader.Result(submission="a.py", status="passed", score=1.0,
                                                           message="ok"))
    assert quiet.getvalue() == ""


# ---------------------------------------------------------------------------------------------------------------------
# How a worker ended: its supervisor's report, else the exit status (worker._supervise, grader._how_it_ended).


def test_how_a_worker_ended_is_the_supervisors_report_and_else_honestly_ambiguous():
    started = {"started": True}
    # The supervisor's report: a signal (with its cause where the name does not say it) or an exit code, for sure.
    assert grader._how_it_ended(137, dict(started, signal=9), True) == \
        "the process died: killed by SIGKILL (out of memory, or a kill signal)"
    assert grader._how_it_ended(152, dict(started, signal=24), True) == \
        "the process died: killed by SIGXCPU (over its CPU-time limit)"
    assert grader._how_it_ended(139, dict(started, signal=11), True) == "the process died: killed by SIGSEGV"
    assert grader._how_it_ended(134, dict(started, signal=6), False) == "the process died: killed by SIGABRT"
    for code in (137, 139):
        assert grader._how_it_ended(code, dict(started, exit=code), True).startswith(
            f"the process exited (code {code}) before grading finished")
    # No final report under bubblewrap: 128 + n is a signal or an exit code; both readings, neither picked.
    assert grader._how_it_ended(137, started, True) == (
        "the process exited with status 137 (128+9: killed by SIGKILL, or exit(137)) without saying which: its "
        "supervisor was killed first (by the submission?)")
    assert grader._how_it_ended(134, started, True).startswith(
        "the process exited with status 134 (128+6: killed by SIGABRT, or exit(134))")
    # At the process level, Popen's signal is the supervisor's.
    assert grader._how_it_ended(-9, started, False) == \
        "the process ended without saying how: its supervisor was killed by SIGKILL (by the submission?)"
    assert grader._how_it_ended(None, started, True).startswith("the process stopped answering and did not exit")
    assert grader._how_it_ended(3, started, True).startswith("the process exited (code 3)")


def test_the_supervisors_report_is_read_from_its_pipe_and_nothing_else_counts():
    def report(data: bytes) -> dict:
        r, w = os.pipe()
        os.write(w, data)
        os.close(w)
        try:
            return grader._read_status(r)
        finally:
            os.close(r)

    assert report(b"started\nsignal 11\n") == {"started": True, "signal": 11}
    assert report(b"started\nexit 137\n") == {"started": True, "exit": 137}
    assert report(b"started\n") == {"started": True}
    assert report(b"") == {"started": False}
    assert report(b"exit 0\n") == {"started": False}  # an end without a start is no report
    assert report(b"started\nsignal nine\nexit -1\n") == {"started": True}
    assert grader._read_status(None) == {"started": False}


def test_a_real_supervisor_reports_a_signal_and_an_exit_code(tmp_path):
    """worker.SUPERVISOR in a real process: the child it execs is killed by SIGSEGV, or calls os._exit(139); the
    report tells them apart, and the supervisor ends the same way (Popen sees -11, or 139)."""
    from gpucourse.grading import worker

    for body, want, rc in (("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", b"signal 11", -11),
                           ("import os; os._exit(139)", b"exit 139", 139)):
        r, w = os.pipe()
        child = [sys.executable, "-c", "import resource; resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); " + body]
        proc = subprocess.run(worker.supervised(child, w), pass_fds=(w,), timeout=60, cwd=tmp_path)
        os.close(w)
        data = os.read(r, 100)
        os.close(r)
        assert (data, proc.returncode) == (b"started\n" + want + b"\n", rc)


def test_the_prebuild_worker_is_given_the_first_case(tmp_path):
    """grader._prebuild (a CUDA submission compiled by a worker that sees no GPU, before it is graded) gets past the
    worker's first words ("loading", then "ready") and hands it the first case: the call is what compiles. It read
    only "ready" once, and after the worker learned to say "loading" first it stopped there and nothing compiled
    (the H100's gpu test found it). The submission here records the call in its private folder."""
    from gpucourse.grading import sandbox

    sub = tmp_path / "records_its_call.py"
    sub.write_text("import os\n\ndef block_sum(x):\n"
                   "    open(os.path.join(os.environ['TMPDIR'], 'called'), 'w').write(str(x.numel()))\n"
                   "    return x.sum()\n")
    private = tmp_path / "private"
    private.mkdir()
    grader._prebuild(get("block_sum"), str(sub), str(private), sandbox.detect("process"), time.monotonic() + 120,
                     grader.MEMORY_MB)
    assert (private / "called").exists(), "the prebuild worker was never given a case"


def test_prebuilds_run_ahead_of_the_grading_slots(monkeypatch):
    """grade() on a GPU, CUDA: the prebuilds (here stand-ins of 0.3 s) run in their own pool, in order, ahead of
    the grading slots (stand-ins of 0.2 s), so a slot that frees finds the next submission compiled. The old grader
    compiled a submission in its slot, after the previous one was graded: 6 x 0.5 s in one slot. At most jobs +
    prebuild_jobs submissions are prepared and not yet graded; results keep the given order."""
    from gpucourse.grading import sandbox

    t0, log, guard = time.monotonic(), [], threading.Lock()

    def note(what, path):
        with guard:
            log.append((what, path, time.monotonic() - t0))

    def fake_prepare(ex, path, timeout, isolation, mem_mb=grader.MEMORY_MB):
        note("prebuild", path)
        time.sleep(0.3)
        note("prebuilt", path)
        return grader.Prepared(path=path, seconds=0.3)

    def fake_grade(ex, st, timeout, gpu=None, mem_mb=grader.MEMORY_MB, isolation=None):
        note("graded worker", st.path)
        time.sleep(0.2)
        return grader.Result(submission=st.path, status="passed", score=1.0, message="ok", seconds=st.seconds + 0.2)

    monkeypatch.setattr(staging, "needs_prebuild", lambda ex: True)
    monkeypatch.setattr(grader.pycache, "prepare", lambda **kw: None)  # the batch's setup, not what is timed here
    monkeypatch.setattr(grader, "prepare", fake_prepare)
    monkeypatch.setattr(grader, "grade_prepared", fake_grade)
    paths = [f"s{i}.py" for i in range(6)]
    report = grader.grade(get("block_sum"), paths, jobs=1, prebuild_jobs=2, progress=False,
                          isolation=sandbox.detect("process"))
    wall = time.monotonic() - t0
    assert [r["submission"] for r in report["results"]] == paths
    assert [r["status"] for r in report["results"]] == ["passed"] * 6
    at = {(what, path): t for what, path, t in log}
    assert [path for what, path, _ in sorted(log, key=lambda e: e[2]) if what == "prebuild"] == paths
    assert at[("prebuild", "s1.py")] < at[("graded worker", "s0.py")] + 0.2  # compiled while s0 was graded
    for i in range(3, 6):  # no more than 1 + 2 ahead of the slot
        assert at[("prebuild", f"s{i}.py")] >= at[("graded worker", f"s{i - 3}.py")], log
    # serial takes at least 3.0 s of sleeps; pipelined about 1.5 s idle, so 2.9 leaves a loaded machine 1.4 s
    assert wall < 2.9, f"{wall:.2f} s: the slot waited for compiles (serial: 3.0 s, pipelined: about 1.5 s)"


def test_how_many_compile_at_once_is_jobs_or_the_environments(monkeypatch):
    """Compiles are CPU work: by default as many run at once as --jobs, $GPUCOURSE_PREBUILD_JOBS sets another
    number (the benchmark's --prebuild-jobs), and a value that is not a whole number >= 1 is refused, naming it."""
    from gpucourse.grading import sandbox

    running, most, guard = [0], [0], threading.Lock()

    def fake_prepare(ex, path, timeout, isolation, mem_mb=grader.MEMORY_MB):
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.1)
        with guard:
            running[0] -= 1
        return grader.Prepared(path=path)

    def fake_grade(ex, st, timeout, gpu=None, mem_mb=grader.MEMORY_MB, isolation=None):
        return grader.Result(submission=st.path, status="passed", score=1.0, message="ok")

    monkeypatch.setattr(staging, "needs_prebuild", lambda ex: True)
    monkeypatch.setattr(grader, "prepare", fake_prepare)
    monkeypatch.setattr(grader, "grade_prepared", fake_grade)
    iso = sandbox.detect("process")
    for env, want in ((None, 3), ("1", 1)):
        if env is None:
            monkeypatch.delenv(grader.PREBUILD_JOBS_ENV, raising=False)
        else:
            monkeypatch.setenv(grader.PREBUILD_JOBS_ENV, env)
        most[0] = 0
        grader.grade(get("block_sum"), [f"s{i}.py" for i in range(8)], jobs=3, progress=False, isolation=iso)
        assert most[0] == want, (env, most[0])
    monkeypatch.setenv(grader.PREBUILD_JOBS_ENV, "two")
    with pytest.raises(ValueError, match=r"\$GPUCOURSE_PREBUILD_JOBS='two': expected a whole number >= 1"):
        grader.grade(get("block_sum"), ["s0.py"], jobs=3, progress=False, isolation=iso)


def test_a_pipelined_submission_is_graded_with_what_its_own_prebuild_left(monkeypatch, tmp_path):
    """The real prebuild and graded workers (CPU mode, in the sandbox where there is one), pipelined as grade() does
    for CUDA on a GPU: each submission's prebuild worker leaves a mark in its private /tmp, and its graded worker
    passes only if it finds its own (a slot given another submission's folder, or a fresh one, fails it)."""
    monkeypatch.setattr(staging, "needs_prebuild", lambda ex: True)
    with open(os.path.join(FOLDER, "right_basic.py")) as f:
        right = f.read()
    paths = []
    for i in range(3):
        sub = tmp_path / f"marked{i}.py"
        sub.write_text(right.replace("def vector_add(x, y):\n", f"""def vector_add(x, y):
    import os
    mark = os.path.join(os.environ["TMPDIR"], "prebuilt-by")
    if os.environ.get("GPUCOURSE_CUDA_PREBUILD") == "1":
        open(mark, "w").write("{i}")
    elif not os.path.exists(mark) or open(mark).read() != "{i}":
        raise RuntimeError("not my prebuild's folder")
""", 1))
        paths.append(str(sub))
    report = grader.grade(get("vector_add"), paths, timeout=120, jobs=2, prebuild_jobs=1, progress=False)
    assert [(r["status"], r["score"]) for r in report["results"]] == [("passed", 1.0)] * 3, \
        [r["message"] for r in report["results"]]


def test_a_prebuilds_seconds_count_against_the_time_limit():
    """The time limit covers a submission's prebuild and its graded worker, not its wait for a slot between them:
    one whose prebuild used all but 50 ms of it times out in its graded worker; its folders are deleted."""
    from gpucourse.grading import sandbox

    iso = sandbox.detect("process")
    ex = get("vector_add")
    st = grader.prepare(ex, os.path.join(FOLDER, "right_basic.py"), 5.0, iso)
    st.seconds = 4.95
    r = grader.grade_prepared(ex, st, 5.0, isolation=iso)
    assert r.status == "timeout" and r.message.startswith("over the time limit of 5 s"), r.message
    assert r.seconds >= 4.95  # the prebuild's seconds and the graded worker's
    assert not os.path.exists(st.tmp) and not os.path.exists(st.stage)


def test_a_submission_that_cannot_be_read_is_said_so(tmp_path):
    folder = tmp_path / "alice.py"  # a folder where a file was expected
    folder.mkdir()
    r = grader.grade_one(get("vector_add"), str(folder), 60)
    assert (r.status, r.score) == ("error", 0.0) and r.message == "could not read the submission: Is a directory"
    assert r.submission == str(folder) and r.checks[0]["name"] == "load"


# ---------------------------------------------------------------------------------------------------------------------
# --jobs: auto (the default) or a number.


def test_jobs_is_auto_or_a_whole_number_and_says_what_is_wrong(capsys):
    ap = grader_cli._parser()
    assert ap.parse_args(["vector_add", "a.py"]).jobs == "auto"
    assert ap.parse_args(["vector_add", "a.py", "--jobs", "AUTO"]).jobs == "auto"
    assert ap.parse_args(["vector_add", "a.py", "--jobs", "3"]).jobs == 3
    for bad, why in (("0", "must be at least 1 (or auto), got 0"), ("-2", "must be at least 1 (or auto), got -2"),
                     ("two", "expected auto or a whole number of submissions graded at once, got 'two'"),
                     ("1.5", "expected auto or a whole number of submissions graded at once, got '1.5'")):
        assert grader_cli.main(["vector_add", os.path.join(FOLDER, "right_basic.py"), "--jobs", bad]) == 2
        assert f"gpucourse grade: error: argument --jobs: {why}" in capsys.readouterr().err, bad


def test_jobs_auto_is_the_usable_cpus_at_most_eight_and_one_per_gib_of_memory():
    gib = 1 << 30
    assert grader_cli.auto_jobs(2, 64 * gib) == (2, "2 usable CPUs")
    assert grader_cli.auto_jobs(1, None) == (1, "1 usable CPU")
    assert grader_cli.auto_jobs(16, 128 * gib) == (8, "16 usable CPUs, at most 8")
    assert grader_cli.auto_jobs(16, int(3.5 * gib)) == (3, "16 usable CPUs, at most 8, 3.5 GiB of memory available "
                                                           "(1 GiB per worker)")
    assert grader_cli.auto_jobs(4, gib // 2)[0] == 1  # never 0
    n, why = grader_cli.auto_jobs()  # this machine
    assert 1 <= n <= min(grader_cli.usable_cpus(), grader_cli.JOBS_CAP) and "usable CPU" in why
    memory = grader_cli.available_memory()
    assert memory is None or memory > 0


def test_the_batch_header_says_how_many_are_graded_at_once(tmp_path):
    empty = tmp_path / "no_function.py"
    empty.write_text("x = 1\n")
    for jobs, said in ((None, f"{grader_cli.auto_jobs()[0]} at a time (--jobs auto: "),
                       ("3", "3 at a time (--jobs 3)")):
        proc = _grade(["vector_add", str(empty), "--timeout", "120"] + (["--jobs", jobs] if jobs else []), timeout=300)
        assert proc.returncode == 0, proc.stderr
        header = proc.stderr.splitlines()[0]
        assert header.startswith(f"gpucourse grade: vector_add: 1 submission, {said}"), proc.stderr
        assert proc.stderr.count(" at a time (") == 1


def test_the_staged_names_are_put_back_in_the_report():
    """Workers see every submission as /submission/submission.py (or .ipynb); messages name the file as given."""
    given = "course/submitted/alice/ps1/alice_ans.py"
    assert grader.unstaged('File "/submission/submission.py", line 3; gpucourse.synchronize at submission.py:24',
                           "/submission/submission.py", given) == \
        f'File "{given}", line 3; gpucourse.synchronize at alice_ans.py:24'
    assert grader.unstaged("my_submission.py and submission.pyc stay", "/submission/submission.py", given) == \
        "my_submission.py and submission.pyc stay"
    assert grader.unstaged('File "/tmp/submission_notebook.py", line 9', "/submission/submission.ipynb",
                           "bob/hw.ipynb") == 'File "/tmp/hw_notebook.py", line 9'
    # A student's file name is theirs to choose: backslashes in it are text, not a regular expression's escapes.
    odd = "submitted/eve/ps1/a\\g<0>\\1.py"
    assert grader.unstaged("at submission.py:7", "/submission/submission.py", odd) == "at a\\g<0>\\1.py:7"
    assert grader.unstaged("submission_notebook.py", "/submission/submission.ipynb", "x\\g.ipynb") == \
        "x\\g_notebook.py"


def _throughput_benchmark():
    from scripts_util import load_script

    return load_script("benchmarks/grading_throughput.py")


def test_the_trace_says_where_a_submissions_time_went(tmp_path, monkeypatch):
    """$GPUCOURSE_GRADE_TRACE (benchmarks/grading_throughput.py sets it): one JSON line per event of a submission's
    grading, in order: start, the worker ready, each case drawn and held (in CPU mode a hold with no wait), end with
    the status. The benchmark's phase_summary turns them into seconds per phase; a worker never sees the variable."""
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(grader.TRACE_ENV, str(trace))
    path = os.path.join(FOLDER, "right_basic.py")
    ex = get("vector_add")
    r = grader.grade_one(ex, path, 120)
    assert r.status == "passed", r.message
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {e["submission"] for e in events} == {path}
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    names = [e["event"] for e in events]
    assert names[:2] == ["start", "ready"] and names[-1] == "end" and events[-1]["status"] == "passed"
    assert names[2:-1] == ["drawn", "waited", "released"] * len(ex.cases)
    assert grader.TRACE_ENV not in grader._worker_env(None, str(tmp_path))
    bench = _throughput_benchmark()
    summary = bench.phase_summary(trace.read_text().splitlines())
    assert summary["traced"] == 1 and summary["timing_sum_s"] == 0.0
    assert summary["median_s"]["cases"] > 0 and summary["median_s"]["prebuild"] == 0.0
    assert abs(sum(summary["median_s"].values()) - r.seconds) < 0.1


def test_the_benchmark_reads_every_progress_line_of_the_grader():
    """grading_throughput.py notes when each submission finished from the grader's progress lines. The count is
    padded to the total's width ("[ 1/32]"), and the benchmark's pattern once missed the first nine of 32: the H100
    run's 'first finished at 54.2 s' was the tenth."""
    bench = _throughput_benchmark()
    stream = io.StringIO()
    bar = grader._Progress(32, True, stream=stream)
    for i in (1, 2):
        bar.update(grader.Result(submission=f"/tmp/batch/s{i:03d}.py", status="passed", score=1.0, message="ok",
                                 seconds=40.0 + i))
    got = [bench.PROGRESS_LINE.match(line) for line in stream.getvalue().splitlines()]
    assert [(m[1], m[2], m[3], m[4]) for m in got] == [("1", "32", "/tmp/batch/s001.py", "passed"),
                                                       ("2", "32", "/tmp/batch/s002.py", "passed")]


def test_phase_summary_attributes_a_gpu_submissions_seconds():
    """A GPU submission's trace, made by hand: 10 s compiling without a GPU, 3 s to start, two cases (drawn in 0.5 s
    each, 1 s and 2 s waiting for the shared lock, held 1 s each), the timing's inputs in 0.5 s, 4 s waiting for
    the GPU alone, 1.5 s of timing, 0.25 s to finish."""
    bench = _throughput_benchmark()
    s = "a.py"
    ev = [(0, "start", {}), (10, "prebuilt", {}), (13, "ready", {}), (13.5, "drawn", {}),
          (14.5, "waited", {"exclusive": False, "seconds": 1.0}), (15.5, "released", {"exclusive": False}),
          (16, "drawn", {}), (18, "waited", {"exclusive": False, "seconds": 2.0}),
          (19, "released", {"exclusive": False}), (19.5, "perf_drawn", {}),
          (23.5, "waited", {"exclusive": True, "seconds": 4.0}), (25, "released", {"exclusive": True}),
          (25.25, "end", {"status": "passed"})]
    lines = [json.dumps({"t": t, "submission": s, "event": name, **kw}) for t, name, kw in ev]
    got = bench.phase_summary(lines[::-1])  # order on disk does not matter: events are sorted by time
    assert got["traced"] == 1 and got["timing_sum_s"] == 1.5
    assert got["median_s"] == {"prebuild": 10.0, "queued": 0.0, "startup": 3.0, "draw": 1.0, "wait_shared": 3.0,
                               "cases": 2.0, "perf_draw": 0.5, "wait_exclusive": 4.0, "timing": 1.5, "rest": 0.25}
    assert "slot_wait_s" not in got and "rounds" not in got  # graded by grade_one: no slot, no round numbers


def test_phase_summary_of_a_pipelined_batch_says_what_the_slots_waited_and_the_rounds():
    """grade()'s pipeline: "slot" is when a grading slot was free for a submission. a.py's slot waited 4 s for its
    prebuild (slot at 6, compiled at 10); b.py was compiled at 12 and waited 3 s for a slot (queued). Their timings
    shared one round on GPU 0, c.py's had a round of its own."""
    bench = _throughput_benchmark()
    ev = {"a.py": [(0, "start", {}), (6, "slot", {}), (10, "prebuilt", {}), (12, "ready", {}),
                   (13, "waited", {"exclusive": True, "seconds": 1.0, "round": 1, "gpu": "0"}),
                   (14, "released", {"exclusive": True}), (14, "end", {"status": "passed"})],
          "b.py": [(2, "start", {}), (12, "prebuilt", {}), (15, "slot", {}), (17, "ready", {}),
                   (18, "waited", {"exclusive": True, "seconds": 1.0, "round": 1, "gpu": "0"}),
                   (19, "released", {"exclusive": True}), (19, "end", {"status": "passed"})],
          "c.py": [(3, "start", {}), (4, "slot", {}), (13, "prebuilt", {}), (15, "ready", {}),
                   (20, "waited", {"exclusive": True, "seconds": 5.0, "round": 2, "gpu": "0"}),
                   (21, "released", {"exclusive": True}), (21, "end", {"status": "passed"})]}
    lines = [json.dumps({"t": t, "submission": s, "event": name, **kw}) for s, evs in ev.items() for t, name, kw in evs]
    got = bench.phase_summary(lines)
    assert got["traced"] == 3
    assert got["slot_wait_s"] == {"median": 4.0, "sum": 13.0, "max": 9.0}  # a 4, b 0, c 9
    assert got["rounds"] == {"count": 2, "timings": 3, "largest": 2}
    assert got["median_s"]["queued"] == 0.0 and got["median_s"]["startup"] == 2.0  # b: queued 3, startup 2
    assert got["median_s"]["prebuild"] == 10.0 and got["median_s"]["rest"] == 0.0


def test_prepared_submissions_no_slot_took_are_deleted_when_the_batch_stops(monkeypatch, tmp_path):
    """batch.Ahead.close after a batch stopped part way: the staged copies and private folders of submissions that were
    prepared (their prebuild ran) but never graded are deleted, not left in the temp folder."""
    from gpucourse.grading import grader

    made = []

    def fake_prepare(ex, path, timeout, isolation, mem_mb=grader.MEMORY_MB):
        folder = tmp_path / f"prepared-{os.path.basename(path)}"
        folder.mkdir()
        made.append(folder)
        return grader.Prepared(path=path, stage=str(folder))

    ahead = batch.Ahead(fake_prepare, None, [f"s{i}.py" for i in range(4)], 10.0, None, workers=2, slots=1)
    taken = ahead.take(0)  # one slot took the first; the others are prepared ahead (3 = workers + slots)
    deadline = time.monotonic() + 10
    while len(made) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    ahead.close()
    assert sorted(f.name for f in made) == ["prepared-s0.py", "prepared-s1.py", "prepared-s2.py"]
    assert taken.path == "s0.py" and os.path.isdir(taken.stage)  # the slot's own is the slot's to delete
    assert {f.name: f.exists() for f in made if f.name != "prepared-s0.py"} == {"prepared-s1.py": False,
                                                                               "prepared-s2.py": False}


def test_a_batch_shares_the_cores_among_its_workers_unless_the_instructor_set_the_threads(monkeypatch, tmp_path):
    """grade() gives each worker OMP_NUM_THREADS (and MKL's, OpenBLAS's) = cores // workers at once, at least 1:
    16 torch processes of 16 threads each on 16 cores spent CPU the compiles needed. An OMP_NUM_THREADS in the
    grader's environment is the instructor's choice and passes as it is; a single grade_one sets nothing."""
    seen = []
    real = grader._worker_env

    def spy(gpu, tmp):
        env = real(gpu, tmp)
        seen.append({k: env.get(k) for k in grader.THREADS_ENV})
        return env

    monkeypatch.setattr(process, "worker_env", spy)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(grader.os, "cpu_count", lambda: 6)
    ex, path = get("vector_add"), os.path.join(FOLDER, "right_basic.py")
    report = grader.grade(ex, [path, path], timeout=120, jobs=2, progress=False)
    assert [r["status"] for r in report["results"]] == ["passed", "passed"]
    assert seen and all(s == dict.fromkeys(grader.THREADS_ENV, "3") for s in seen), seen
    assert grader._threads_per_worker[0] is None  # the batch's setting ends with it
    assert grader.worker_threads(16) == 1 and grader.worker_threads(0) == 6
    seen.clear()
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    grader.grade(ex, [path], timeout=120, jobs=2, progress=False)
    assert seen and all(s["OMP_NUM_THREADS"] == "5" and s["MKL_NUM_THREADS"] is None for s in seen), seen
    seen.clear()
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert grader.grade_one(ex, path, 120).status == "passed"
    assert seen and all(v is None for s in seen for v in s.values()), seen


# ---------------------------------------------------------------------------------------------------------------------
# Issue 35 item 5: where a timeout hung, from the stack the worker writes just before the limit (untrusted text).


def test_where_it_hung_reads_the_submissions_innermost_frames(tmp_path):
    staged = tmp_path / "submission.py"
    staged.write_text("import time\n\ndef helper():\n    while True: pass\n\ndef vector_add(x, y):\n    helper()\n")
    dump = ('Timeout (0:00:09.500000)!\n'
            'Thread 0x00007f0000000001 (most recent call first):\n'
            '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
            'Thread 0x00007f0000000002 (most recent call first):\n'
            f'  File "{staged}", line 4 in helper\n'
            f'  File "{staged}", line 7 in vector_add\n'
            '  File "/x/gpucourse/grading/checker.py", line 201 in run_call\n'
            '  File "/x/gpucourse/grading/worker.py", line 333 in main\n')
    frames = grader._where_it_hung(dump, str(staged), "submitted/alice/hw.py")
    assert frames == ["hw.py, line 4 in helper: `while True: pass`", "hw.py, line 7 in vector_add: `helper()`"]


def test_where_it_hung_treats_a_forged_dump_as_text(tmp_path):
    """What the worker wrote is the submission's to forge: only well-formed frame lines of its own file count, the
    code shown is the grader's copy's, the frames are at most STACK_FRAMES, and nothing in it is acted on."""
    staged = tmp_path / "submission.py"
    staged.write_text("x = 1\n")
    evil = ("\x1b[2J" * 1000 + '  File "submission.py", line 99999999999 in main\n'
            + '  File "/etc/passwd", line 1 in root\n'
            + ''.join(f'  File "/s/submission.py", line 1 in f{i}\x07\n' for i in range(3))
            + ''.join(f'  File "/s/submission.py", line 1 in g{i}\n' for i in range(20))
            + '  File "/s/submission.py", line 1 in `rm -rf`\n' + "\udcff" * 10)
    frames = grader._where_it_hung(evil, str(staged), "hw.py")
    assert frames == [f"hw.py, line 1 in g{i}: `x = 1`" for i in range(grader.STACK_FRAMES)]
    assert grader._where_it_hung("", str(staged), "hw.py") == []
    assert grader._where_it_hung("garbage\x00" * 10000, str(staged), "hw.py") == []


def test_read_stack_is_bounded_and_never_blocks():
    r, w = os.pipe()
    try:
        protocol.nonblocking(r)
        t0 = time.monotonic()
        assert grader._read_stack(r, wait=0.1) == ""  # nothing written (a submission that cancelled the dump)
        assert time.monotonic() - t0 < 10  # a blocking read would never return
        protocol.nonblocking(w)
        written = 0
        try:
            while written < 8 * grader.STACK_BYTES:
                written += os.write(w, b"A" * 4096 + b"\xff\n")
        except BlockingIOError:  # the pipe is full: the worker would block, never the grader
            pass
        text = grader._read_stack(r)
        assert 0 < len(text) <= grader.STACK_BYTES and "\ufffd" in text
    finally:
        os.close(r)
        os.close(w)
    assert grader._read_stack(None) == ""


def test_the_stack_is_written_shortly_before_the_limit():
    assert grader.stack_margin(10) == 0.5 and grader.stack_margin(180) == 1.0 and grader.stack_margin(0.1) == 0.05


def test_a_timeout_names_the_case_and_the_line_at_process_level(tmp_path):
    """The same path as under bubblewrap (the known submissions), at the process level: the case the grader last
    asked for and the submission's frame at the limit."""
    sub = tmp_path / "slow.py"
    sub.write_text("import time\n\n\ndef vector_add(x, y):\n    if x.numel() > 1:\n        time.sleep(1000)\n"
                   "    return x + y\n")
    r = grader.grade_one(get("vector_add"), str(sub), 12, isolation=sandbox.detect("process"))
    assert r.status == "timeout", r.message
    assert "while running case 'n just below a power of two', at slow.py, line 6 in vector_add: " \
           "`time.sleep(1000)`" in r.message, r.message
    assert r.checks[-1]["name"] == "n just below a power of two" and "line 6" in r.checks[-1]["detail"]
