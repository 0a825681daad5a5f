"""The benchmark registry: discovery, targets, CPU-mode skipping, the JSON document."""
import json
import os
import subprocess
import sys

import pytest

import gpucourse
from gpucourse import benchmarks


def test_registry_finds_the_foundation_benchmarks():
    reg = benchmarks.registry()
    assert {"timing_agreement", "ceilings"} <= set(reg)
    assert all(e["lesson"] for e in reg.values())


def test_target_compares_in_the_stated_direction():
    assert benchmarks.target("ratio", 0.96, 0.95)["met"]
    assert not benchmarks.target("ratio", 0.94, 0.95)["met"]
    assert benchmarks.target("cv", 0.01, 0.02, "<=")["met"]
    assert not benchmarks.target("cv", 0.03, 0.02, "<=")["met"]


def _defined_in(module: str):
    fn = lambda: {}  # noqa: E731
    fn.__module__ = module
    return fn


def test_duplicate_names_are_refused():
    benchmarks.register("_probe", gpu_only=False)(_defined_in("gpucourse.lessons.l00_start_here.bench"))
    with pytest.raises(ValueError, match="registered twice"):
        benchmarks.register("_probe")(_defined_in("gpucourse.lessons.l00_start_here.bench"))
    benchmarks._REGISTRY.pop("_probe")


def test_a_benchmark_belongs_to_the_lesson_whose_folder_defines_it():
    assert benchmarks.registry()["triton05_matmul"]["lesson"] == "05"
    assert benchmarks.registry()["timing_agreement"]["lesson"] == "00"
    with pytest.raises(ValueError, match="in a lesson's bench.py"):
        benchmarks.register("_stray")(_defined_in("some_script"))
    assert "_stray" not in benchmarks.registry()


def test_command_writes_json_with_environment(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "gpucourse.cli", "bench", "ceilings", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert {"date", "environment", "results"} <= set(doc)
    assert doc["environment"]["torch"] and doc["environment"]["mode"] in ("gpu", "cpu")
    res = doc["results"]["ceilings"]
    if gpucourse.on_gpu():
        assert res["copy_gbps"] > 0 and res["matmul_tflops"] > 0
    else:
        assert res == {"skipped": "needs a GPU"}


def test_unknown_benchmark_is_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "gpucourse.cli", "bench", "no_such_thing"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "unknown benchmark" in r.stderr


def test_record_does_nothing_in_cpu_mode(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    monkeypatch.setenv("GPUCOURSE_RECORD", str(out))
    monkeypatch.setattr(benchmarks.device, "on_gpu", lambda: False)
    res = {"anything": 1}
    assert benchmarks.record("memory03_fusion", res) is res
    assert not out.exists()


def test_record_unknown_name_is_an_error():
    with pytest.raises(KeyError, match="unknown benchmark"):
        benchmarks.record("no_such_benchmark", {})


def test_record_evaluates_targets_and_merges_into_the_results_file(tmp_path, monkeypatch, capsys):
    """What a lesson records on a GPU: a real (CPU-sized) fusion result, then a synthetic sum_many one; earlier
    entries of the file stay."""
    from gpucourse.lessons.l03_memory_hierarchy import measure as memory03

    out = tmp_path / "r.json"
    out.write_text(json.dumps({"results": {"older": {"kept": True}}}))
    fus = memory03.fusion(n=2**10, rows=8, cols=64, compile=False, bench_kw={"rep_ms": 1, "warmup_ms": 1})
    monkeypatch.setenv("GPUCOURSE_RECORD", str(out))
    monkeypatch.setattr(benchmarks.device, "on_gpu", lambda: True)  # record() only saves GPU measurements
    monkeypatch.setattr(benchmarks.env, "versions", lambda: {"torch": "x", "mode": "gpu"})  # no GPU to ask
    res = benchmarks.record("memory03_fusion", fus)
    assert [t["name"] for t in res["targets"]] == [
        "fused swish_residual (Triton, fp32 2^26) / copy bandwidth", "fused swish_residual: eager time / Triton time"]
    assert "targets" not in fus, "record must not change the lesson's own dict"
    rows = {"sum_many (one CUDA launch)": {"ms": 0.3}, "one torch.sum over the concatenation": {"ms": 0.28},
            "Python loop of t.sum()": {"ms": 36.0}, "torch._foreach_norm": {"ms": 5.0}}
    slow = dict(rows, **{"sum_many (one CUDA launch)": {"ms": 0.35}})
    res = benchmarks.record("cuda04_sum_many", {"seed_case": {"rows": rows}, "random_case": {"rows": slow},
                                                "small_case": {"rows": {}}})
    met = {t["name"]: t["met"] for t in res["targets"]}
    # one target per case, against the ceiling (one torch.sum over the same bytes); no fixed speedup over the loop
    assert met == {"sum_many time / one torch.sum over the concatenation": True,
                   "sum_many time / one torch.sum over the concatenation (sizes 1-200k)": False}
    printed = capsys.readouterr().out
    assert "[MISSED] sum_many time / one torch.sum over the concatenation (sizes 1-200k): 1.25 (target <= 1.15)" \
        in printed
    doc = json.loads(out.read_text())
    assert set(doc["results"]) == {"older", "memory03_fusion", "cuda04_sum_many"}
    assert doc["results"]["cuda04_sum_many"]["measured_in"] == "notebook" and doc["environment"]["torch"]


def test_every_registered_targets_function_reads_what_its_benchmark_returns():
    """Each lesson benchmark with targets apart names the keys its measuring function produces (checked on a
    result shaped by the benchmark's own functions where they run on the CPU)."""
    reg = benchmarks.registry()
    with_targets = {n for n, e in reg.items() if e["targets"] is not None}
    assert {"pipeline01_timing_pairs", "pipeline02_h2d", "pipeline02_overlap", "pipeline02_launch_overhead",
            "pipeline02_training_loop", "memory03_working_set", "memory03_access", "memory03_roofline",
            "memory03_fusion", "cuda04_ladder", "cuda04_sum_many"} <= with_targets
    r = benchmarks.evaluate("cuda04_ladder", {"rows": {"block_sum (workbook)": {"gbps": 2900.0},
                                                       "torch.sum": {"gbps": 3000.0}}})
    assert r["targets"][0]["met"] and r["lesson"] == "04"
    r = benchmarks.evaluate("memory03_working_set", {"sizes": [2**22, 2**30], "gbps": [9000.0, 3000.0],
                                                     "l2_bytes": 50 * 2**20})
    assert r["targets"] == [] and r["l2_over_hbm"] == 3.0


def test_timing_pair_targets_check_the_direction_of_each_mistake(monkeypatch):
    from gpucourse.lessons.l01_cpu_vs_gpu_timing import measure as pipeline

    def pairs(no_sync, first, l2, clocks):
        return {"pairs": [{"mistake": m, "wrong_ms": w, "right_ms": 1.0} for m, w in
                          (("no synchronize", no_sync), ("first call timed", first), ("inputs left in L2", l2),
                           ("clocks not steady (idle GPU, no settle)", clocks))]}

    met = lambda res: [t["met"] for t in benchmarks.evaluate("pipeline01_timing_pairs", res)["targets"]]  # noqa
    assert met(pairs(0.05, 900.0, 0.5, 0.8)) == [True, True, True, True]
    assert met(pairs(0.95, 1.05, 0.95, 1.05)) == [False, False, False, False]  # under 10% apart
    assert met(pairs(20.0, 0.01, 1.8, 1.25)) == [False, False, False, True]  # pointing the wrong way
    # The direction comes from pipeline.MISTAKE_DIRECTION alone: a field stamped on the pair does not override it.
    assert met({"pairs": [{"mistake": "no synchronize", "wrong_reads": "high", "wrong_ms": 20.0, "right_ms": 1.0}]}) \
        == [False]
    with pytest.raises(ValueError, match="unknown timing mistake 'x'"):
        benchmarks.evaluate("pipeline01_timing_pairs", {"pairs": [{"mistake": "x", "wrong_ms": 1, "right_ms": 2}]})
    monkeypatch.setitem(pipeline.MISTAKE_DIRECTION, "x", "up")
    with pytest.raises(ValueError, match="must be 'low', 'high' or 'either', not 'up'"):
        benchmarks.evaluate("pipeline01_timing_pairs", {"pairs": [{"mistake": "x", "wrong_ms": 1, "right_ms": 2}]})


def test_summary_lists_targets_the_way_record_prints_them():
    doc = {"environment": {"gpu": None, "driver": None, "torch": "x", "triton": None, "mode": "cpu"},
           "results": {"a": {"targets": [benchmarks.target("ratio", 0.5, 0.9)]}, "b": {"skipped": "needs a GPU"},
                       "c": {"error": "Traceback ..."}}}
    text = benchmarks.summary(doc)
    assert benchmarks.format_targets(doc["results"]["a"], indent="    ") in text
    assert "    [MISSED] ratio: 0.5 (target >= 0.9)" in text
    assert "  b: skipped (needs a GPU)" in text and "  c: ERROR" in text


def _gpu_suite():
    from scripts_util import load_script

    return load_script("benchmarks/gpu_suite.py", "gpu_suite_under_test")


def test_gpu_suite_strips_machine_paths_from_text_and_tracebacks(monkeypatch):
    import nbformat

    suite = _gpu_suite()
    monkeypatch.setenv("PYTHONPATH", f"/tmp/site:{suite.ROOT}")  # packages installed into a PYTHONPATH folder
    where = (f"{suite.ROOT}/gpucourse/x.py and /home/me/.venv/lib/python3.11/site-packages/torch/y.py and "
             f"/tmp/site/torchao/z.py")
    cell = nbformat.v4.new_code_cell("1 / 0", outputs=[
        nbformat.v4.new_output("stream", name="stderr", text=where),
        nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="", traceback=["Traceback", where])])
    nb = nbformat.v4.new_notebook(cells=[cell])
    suite._strip_paths(nb)
    clean = "<repo>/gpucourse/x.py and <site-packages>/torch/y.py and <site-packages>/torchao/z.py"
    assert cell.outputs[0]["text"] == clean
    assert cell.outputs[1]["traceback"] == ["Traceback", clean]


def test_gpu_suite_writes_its_summary_and_leaves_notebook_benchmarks_to_the_notebooks(tmp_path, monkeypatch):
    """The run's summary lands in the results file's "suite" (it used to be written before it was known), and
    benchmarks that a selected notebook records are not also measured by the suite."""
    import gpucourse

    suite = _gpu_suite()
    results = tmp_path / "fake.json"
    benched = []

    def run_benchmarks(tag, names, saved=lambda: None):
        benched.extend(names)
        for name in names:
            benchmarks.merge_into(str(results), name, {"ms": 1.0})
        return True, [results]

    monkeypatch.setattr(gpucourse, "on_gpu", lambda: True)
    monkeypatch.setattr(benchmarks.env, "versions", lambda: {"torch": "x", "mode": "gpu"})
    monkeypatch.delenv("GPUCOURSE_RECORD", raising=False)  # main() sets it; restored afterwards
    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    monkeypatch.setattr("gpucourse.specs.slug", lambda: "fake")
    monkeypatch.setattr(suite, "run_doctor", lambda tag: [])
    monkeypatch.setattr(suite, "run_benchmarks", run_benchmarks)
    monkeypatch.setattr(suite, "run_notebooks", lambda pattern, saved, limit=None: (True, [], {pattern: 2.0}))
    monkeypatch.setattr(suite, "run_tests", lambda tag, args: (False, []))
    assert suite.main(["--notebooks", "notebooks/05_triton.ipynb"]) == 1  # the tests "failed"
    assert {"ceilings", "cuda04_ladder"} <= set(benched)
    assert not {"triton05_matmul", "triton05_softmax", "triton05_vector_add"} & set(benched)
    doc = json.loads(results.read_text())
    suite_doc = {k: v for k, v in doc["suite"].items() if k != "unit_seconds"}
    assert suite_doc == {"notebooks_ok": True, "notebook_seconds": {"notebooks/05_triton.ipynb": 2.0},
                         "notebook_status": {"notebooks/05_triton.ipynb": "ok"}, "notebooks_over_budget": {},
                         "tests_passed": False, "last_part": "1/1"}
    assert set(doc["suite"]["unit_seconds"]) == {"doctor:", "tests:tests"} | {f"bench:{b}" for b in benched}
    assert set(doc["results"]) == set(benched)

    # A later run of another notebook keeps the first one's seconds; one over the budget fails the suite.
    monkeypatch.setattr(suite, "run_notebooks", lambda pattern, saved, limit=None: (True, [], {pattern: 181.0}))
    monkeypatch.setattr(suite, "run_tests", lambda tag, args: (True, []))
    assert suite.main(["--notebooks", "notebooks/03_memory_hierarchy.ipynb", "--skip-benchmarks"]) == 1
    doc = json.loads(results.read_text())
    assert doc["suite"]["notebook_seconds"] == {"notebooks/05_triton.ipynb": 2.0,
                                                "notebooks/03_memory_hierarchy.ipynb": 181.0}
    assert doc["suite"]["notebooks_ok"] is False
    assert doc["suite"]["notebooks_over_budget"] == {"notebooks/03_memory_hierarchy.ipynb": 181.0}


def _fake_suite(suite, tmp_path, monkeypatch, ran, fail=()):
    """The suite with every step replaced by one that records its name (and fails those in ``fail``)."""
    import gpucourse

    monkeypatch.setattr(gpucourse, "on_gpu", lambda: True)
    monkeypatch.setattr(benchmarks.env, "versions", lambda: {"torch": "x", "mode": "gpu"})
    monkeypatch.delenv("GPUCOURSE_RECORD", raising=False)
    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    monkeypatch.setattr("gpucourse.specs.slug", lambda: "fake")

    def step(unit, result):
        ran.append(unit)
        if unit in fail:
            raise KeyboardInterrupt(unit)  # the machine taken away in the middle of a step
        return result

    monkeypatch.setattr(suite, "run_doctor", lambda tag: step("doctor:", []))
    monkeypatch.setattr(suite, "run_benchmarks", lambda tag, names, saved=lambda: None:
                        step("bench:" + names[0], (True, [])))
    monkeypatch.setattr(suite, "run_notebooks", lambda p, saved, limit=None: step("notebook:" + p, (True, [], {p: 50.0})))
    monkeypatch.setattr(suite, "run_grader", lambda tag, ex: step("grade:" + ex, (True, [])))
    monkeypatch.setattr(suite, "run_tests", lambda tag, args: step("tests:" + " ".join(args), (True, [])))


def test_gpu_suite_parts_cover_every_step_once_and_resume_skips_what_a_cut_run_finished(tmp_path, monkeypatch):
    suite = _gpu_suite()
    selection = ["--notebooks", "notebooks/0[0-4]_*.ipynb", "--bench", "ceilings", "cuda04_sum_many",
                 "--grade", "vector_add", "softmax"]
    everything = []
    _fake_suite(suite, tmp_path, monkeypatch, everything)
    assert suite.main(selection) == 0
    assert len(everything) == len(set(everything)) == 1 + 1 + 5 + 2 + 1  # doctor, bench, notebooks, grades, tests
    assert "bench:cuda04_sum_many" not in everything  # lesson 04's notebook records it

    parts = []
    for k in (1, 2, 3):
        ran = []
        _fake_suite(suite, tmp_path, monkeypatch, ran)
        assert suite.main(selection + ["--part", f"{k}/3"]) == 0
        parts.append(ran)
    assert sorted(sum(parts, [])) == sorted(everything)  # every step in exactly one part
    assert all(parts), parts
    # balanced by recorded time: the tests (400 s by default) share no part with much else
    assert ["tests:tests"] in parts or max(len(p) for p in parts) - min(len(p) for p in parts) <= 8

    # A run cut short in its third step; --resume runs only what it had not finished.
    first = []
    _fake_suite(suite, tmp_path, monkeypatch, first, fail={everything[2]})
    with pytest.raises(KeyboardInterrupt):
        suite.main(selection)
    assert first == everything[:3]
    again = []
    _fake_suite(suite, tmp_path, monkeypatch, again)
    assert suite.main(selection + ["--resume"]) == 0
    assert again == everything[2:]
    # a resume of another selection starts over
    other = []
    _fake_suite(suite, tmp_path, monkeypatch, other)
    assert suite.main(selection[:-1] + ["--resume"]) == 0
    assert len(other) == len(everything) - 1


def test_gpu_suite_refuses_a_bad_part():
    suite = _gpu_suite()
    for bad in ("0/3", "4/3", "2", "a/b"):
        with pytest.raises(SystemExit):
            suite.main(["--part", bad, "--list"])


REAL_PYTHON = sys.executable


def _fake_python(tmp_path, body: str):
    """An executable that stands in for the child's Python interpreter (run_in_child runs ``python -c CODE``)."""
    exe = tmp_path / f"fake-python-{len(list(tmp_path.iterdir()))}"
    exe.write_text(f"#!{REAL_PYTHON}\nimport re, sys, os, time, json\ncode = sys.argv[2]\n" + body)
    exe.chmod(0o755)
    return str(exe)


def test_run_in_child_returns_the_childs_result_and_passes_its_lines_through(tmp_path, monkeypatch, capsys):
    body = ("out = re.search(r\"open\\('([^']+)', 'w'\\)\", code).group(1)\n"
            "print('step 1 of 1', flush=True)\n"
            "json.dump({'rows': [1, 2], 'name': re.search(r\"registry\\(\\)\\['([^']+)'\", code).group(1)},"
            " open(out, 'w'))\n")
    monkeypatch.setattr(benchmarks.sys, "executable", _fake_python(tmp_path, body))
    assert benchmarks.run_in_child("quant07_gemv", timeout_s=60) == {"rows": [1, 2], "name": "quant07_gemv"}
    assert "step 1 of 1" in capsys.readouterr().out


def test_run_in_child_survives_a_crash_and_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmarks.sys, "executable",
                        _fake_python(tmp_path, "print('loading torchao', flush=True)\nos.kill(os.getpid(), 9)\n"))
    with pytest.raises(RuntimeError, match=r"(?s)failed in its child process \(killed by signal 9\).*loading torchao"):
        benchmarks.run_in_child("quant07_gemv", timeout_s=60)
    monkeypatch.setattr(benchmarks.sys, "executable",
                        _fake_python(tmp_path, "print('compiling', flush=True)\ntime.sleep(60)\n"))
    with pytest.raises(RuntimeError, match=r"(?s)did not finish in 1 s \(child process killed\).*compiling"):
        benchmarks.run_in_child("quant07_gemv", timeout_s=1)
    monkeypatch.setattr(benchmarks.sys, "executable", _fake_python(tmp_path, "sys.exit(3)\n"))
    with pytest.raises(RuntimeError, match=r"exit code 3"):
        benchmarks.run_in_child("quant07_gemv", timeout_s=60)
    with pytest.raises(KeyError, match="unknown benchmark"):
        benchmarks.run_in_child("no_such_benchmark")


def test_merge_results_moves_only_the_named_entries_and_refuses_missing_ones(tmp_path):
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = {"results": {"a": {"v": 1}, "b": {"v": 2}}, "environment": {"gpu": "new"},
           "suite": {"notebook_seconds": {"n1": 10.0, "n2": 300.0}, "notebook_status": {"n1": "ok", "n2": "ok"}}}
    dst = {"results": {"a": {"v": 0}, "c": {"v": 3}}, "environment": {"gpu": "old"},
           "suite": {"notebook_seconds": {"n0": 5.0, "n2": 100.0}, "notebook_status": {"n0": "ok", "n2": "failed"},
                     "notebooks_over_budget": {}, "notebooks_ok": False}}
    (tmp_path / "src.json").write_text(json.dumps(src))
    (tmp_path / "dst.json").write_text(json.dumps(dst))
    cmd = [sys.executable, os.path.join(root, "benchmarks", "merge_results.py"), str(tmp_path / "src.json"),
           "--into", str(tmp_path / "dst.json")]
    subprocess.run(cmd + ["--results", "b", "--notebooks", "n2"], check=True, capture_output=True)
    out = json.loads((tmp_path / "dst.json").read_text())
    assert out["results"] == {"a": {"v": 0}, "b": {"v": 2}, "c": {"v": 3}}
    assert out["suite"]["notebook_seconds"] == {"n0": 5.0, "n2": 300.0}
    assert out["suite"]["notebook_status"] == {"n0": "ok", "n2": "ok"}
    assert out["suite"]["notebooks_over_budget"] == {"n2": 300.0} and out["suite"]["notebooks_ok"] is False
    assert out["environment"] == {"gpu": "new"}
    bad = subprocess.run(cmd + ["--results", "zzz"], capture_output=True, text=True)
    assert bad.returncode != 0 and "'zzz' is not among the source's results" in bad.stderr
    assert json.loads((tmp_path / "dst.json").read_text()) == out  # a refused merge writes nothing


def test_gpu_suite_archive_keeps_what_notebooks_recorded_when_a_run_is_cut(tmp_path, monkeypatch):
    """Notebooks record their benchmarks into the results file as they run: a run cut after them must bring
    those records back in the archive (they were lost once, when the file joined the archive only at the end)."""
    import tarfile

    suite = _gpu_suite()
    ran = []
    _fake_suite(suite, tmp_path, monkeypatch, ran, fail={"notebook:notebooks/01_cpu_vs_gpu_timing.ipynb"})

    def notebook(p, saved, limit=None):
        ran.append("notebook:" + p)
        if p.startswith("notebooks/01"):
            raise KeyboardInterrupt(p)
        benchmarks.merge_into(str(tmp_path / "fake.json"), "recorded_by_00", {"ms": 1.0})
        return True, [], {p: 5.0}

    monkeypatch.setattr(suite, "run_notebooks", notebook)
    archive = tmp_path / "suite.tar.gz"
    with pytest.raises(KeyboardInterrupt):
        suite.main(["--notebooks", "notebooks/0[01]_*.ipynb", "--skip-benchmarks", "--skip-tests",
                    "--archive", str(archive)])
    with tarfile.open(archive) as tar:
        doc = json.load(tar.extractfile(next(n for n in tar.getnames() if n.endswith("/fake.json"))))
    assert "recorded_by_00" in doc["results"]


def test_recorded_reads_a_committed_results_file_and_names_a_missing_one():
    """The one reader of benchmarks/results/ that lessons use to show a recorded run (lessons 06, 07, 09, 10)."""
    from gpucourse import benchmarks

    doc = benchmarks.recorded("h100.json")
    assert "results" in doc and "environment" in doc
    with pytest.raises(FileNotFoundError, match="no-such-run.json"):
        benchmarks.recorded("no-such-run.json")


def test_gpu_suite_as_another_gpu_collects_the_lines_that_name_its_capability():
    import nbformat

    suite = _gpu_suite()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text="NVIDIA H100 as sm_75: no bf16 tensor cores, float16 instead.\nok\n")]),
        nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
            "execute_result", data={"text/plain": "FP8 skipped on sm_75 (no fp8 tensor cores)."})]),
        nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output("stream", name="stdout", text="sm_80 only\n")]),
    ])
    assert suite.capability_lines(nb, (7, 5)) == ["NVIDIA H100 as sm_75: no bf16 tensor cores, float16 instead.",
                                                  "FP8 skipped on sm_75 (no fp8 tensor cores)."]
    assert suite.capability_lines(nb, (8, 0)) == ["sm_80 only"]


def test_gpu_suite_as_a_t4_runs_notebooks_without_recording_and_summarises_them_apart(tmp_path, monkeypatch):
    """--capability T4: the limit reaches the notebooks (the environment and run_notebooks' ``limit``), no benchmark
    runs and nothing is recorded into the GPU's own results; the summary goes to <gpu>-as-t4.json with each notebook's
    status and capability lines. An unknown capability stops the suite with the accepted forms."""
    import gpucourse

    suite = _gpu_suite()
    seen = []

    def run_notebooks(pattern, saved, limit=None):
        seen.append((pattern, limit, os.environ.get("GPUCOURSE_CAPABILITY"), os.environ.get("GPUCOURSE_RECORD")))
        return True, [], {pattern: {"seconds": 3.0, "status": "ok", "capability_lines": ["float16 on sm_75."]}}

    monkeypatch.setattr(gpucourse, "on_gpu", lambda: True)
    monkeypatch.delenv("GPUCOURSE_RECORD", raising=False)
    monkeypatch.setenv("GPUCOURSE_CAPABILITY", "")  # main() sets it; restored afterwards
    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    monkeypatch.setattr("gpucourse.specs.slug", lambda: "fake")
    monkeypatch.setattr(suite, "run_doctor", lambda tag: [])
    monkeypatch.setattr(suite, "run_benchmarks", lambda *a, **k: pytest.fail("no benchmark runs as another GPU"))
    monkeypatch.setattr(suite, "run_notebooks", run_notebooks)
    assert suite.main(["--capability", "T4", "--skip-tests", "--notebooks", "notebooks/05_triton.ipynb"]) == 0
    assert seen == [("notebooks/05_triton.ipynb", (7, 5), "T4", None)]
    assert not (tmp_path / "fake.json").exists()
    doc = json.loads((tmp_path / "fake-as-t4.json").read_text())["suite"]
    assert doc["capability"] == {"as": "T4", "sm": "sm_75", "notebooks": {"notebooks/05_triton.ipynb": {
        "seconds": 3.0, "status": "ok", "capability_lines": ["float16 on sm_75."]}}}
    assert doc["notebook_seconds"] == {"notebooks/05_triton.ipynb": 3.0}
    assert suite.main(["--capability", "T5", "--skip-tests"]) == 2
