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
import threading
import time

import pytest
import torch

import gpucourse
from gpucourse.grading.exercise import get
from gpucourse.grading import checker, grader, protocol

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
    "wrong_sparse_output.py": ("failed", "layout sparse_coo", []),
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
    assert "1 when the grader itself failed" in proc.stdout  # the exit status main() returns on a grader bug


# --- judged exercises (Exercise.judge): the judge runs inside the isolated worker --------------------------------

# exercise -> file -> (status (None: any), substring of the message (None: any), substrings that must appear among the
# flags). A cheat that would pass in-process must fail here for the right reason, or (the documented limitation:
# forging from inside the call) at least be flagged.
JUDGED = {
    "fix_training_loop": {
        "right_device_metrics.py": ("passed", "all 2 cases passed", []),
        "wrong_item_in_loop.py": ("failed", "Tensor.item at wrong_item_in_loop.py:19", []),
        "wrong_results.py": ("failed", "'losses' differs from the reference loop", []),
        "cheat_patch_detector.py": ("failed", "synchronization(s) inside train_fast", [
            "gpucourse.syncs.detect", "the contents of gpucourse.syncs.READS", "the code of gpucourse.syncs.classify",
            "SyncLog.__len__ (added)", "a TorchFunctionMode left on torch's stack"]),
        "cheat_patch_comparisons.py": ("failed", "'losses' differs from the reference loop", [
            "torch.allclose", "gpucourse.lessons.l02_async_pipeline.exercises.fix_training_loop.RTOL", "_global_forward_hooks",
            "torch's dispatch"]),
        "cheat_patch_in_call.py": ("failed", "synchronization(s) inside train_fast", [
            "gpucourse.syncs.SyncLog.__bool__ (added)", "torch.equal"]),
        "cheat_background_thread.py": ("error", "tampered with the judge", ["tampered with the judge", "threads"]),
        "cheat_print_and_exit.py": ("error", "raised SystemExit: 0", []),
        # Hooks switched off inside the call blind the detector in CPU mode (a GPU's sync debug mode still sees the
        # syncs): the judge notices that it saw too few torch calls for the steps taken, and the source is flagged.
        "cheat_disable_hooks_in_call.py": ("failed", "the sync detector saw only", ["switches off torch's dispatch"]),
    },
    "roofline_classify": {
        "right_count_bytes.py": ("passed", "all 3 cases passed", []),
        "wrong_no_output_bytes.py": ("failed", "(2x the right value)", []),
        "cheat_lying_bound.py": ("failed", "bound expected 'compute', got 'memory'", []),
        # Threads are not wrong in themselves (torch.compile leaves a pool): flagged, and judged as usual.
        "right_thread_pool.py": ("passed", "all 3 cases passed", ["left threads running beside the judge"]),
    },
    "time_gpu": {  # both pass gpucourse.check in-process
        "cheat_fake_queue.py": ("failed", "one call takes", []),
        "cheat_lying_float.py": ("failed", "returned 0.001 ms; one call takes", []),
    },
}


@pytest.mark.parametrize("exercise", sorted(JUDGED))
def test_judged_submissions_get_their_verdict(exercise, tmp_path):
    """One `gpucourse grade` call per exercise (a module fixture would be graded once per xdist worker)."""
    folder = os.path.join(HERE, "submissions", exercise)
    files = sorted(os.listdir(folder))
    assert files == sorted(JUDGED[exercise]), "every submission needs an entry in JUDGED (and vice versa)"
    proc = _grade([exercise, *[os.path.join(folder, f) for f in files], "--jobs", "2", "--timeout", str(TIMEOUT),
                   "--json", str(tmp_path / "r.json")], timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["exercise"] == exercise and set(report) == {"exercise", "environment", "results"}
    names = [c.name for c in get(exercise).cases]
    wrong = []
    for r, name in zip(report["results"], files):
        assert os.path.basename(r["submission"]) == name
        assert set(r) == {"submission", "status", "score", "message", "checks", "flags", "seconds"}
        status, reason, flags = JUDGED[exercise][name]
        detail = f"{name}: {r['status']} {r['message']!r} {r['flags']}"
        if (status is not None and r["status"] != status) or (reason is not None and reason not in r["message"]) \
                or not all(any(f in g for g in r["flags"]) for f in flags):
            wrong.append(detail)
        if r["status"] in ("passed", "failed"):  # a verdict for every case, as for compared exercises
            assert [c["name"] for c in r["checks"]] == names, detail
            assert r["score"] == sum(c["passed"] for c in r["checks"]) / len(names), detail
        assert f"{r['status']:<8} {r['score']:.2f}  {r['message']}" in proc.stdout, detail  # the text report
    assert not wrong, "\n".join(wrong)


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


def test_static_flags():
    assert grader.static_flags("import gc\nfor o in gc.get_objects(): pass") == [
        "source walks the garbage collector (gc.get_objects/referrers)"]
    assert grader.static_flags("def vector_add(x, y):\n    return x + y\n") == []
    assert any("ctypes" in f for f in grader.static_flags("import ctypes"))


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
    assert outcome["triton_launches"] == {"add_kernel": 1} and outcome["ops"] == {"aten.add": 2}
    missing_out = _result_msg()
    del missing_out["out"]
    forged = [missing_out, _result_msg(out={"number": "x"}), _result_msg(triton_launches={"add_kernel": "many"}),
              _result_msg(cuda_launches=[1, 2]), _result_msg(ops={"aten.add": "x"}),
              _result_msg(buffers_after=torch.zeros(3)), _result_msg(out2={"number": torch.zeros(2)})]
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
