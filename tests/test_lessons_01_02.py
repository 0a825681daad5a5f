"""Lessons 01-02: the judged exercises (right and known-wrong answers), the judge extension of the spec, the
training-loop versions, and the benchmark registration."""
from __future__ import annotations

import statistics
import time

import pytest
import torch
import torch.nn.functional as F

import gpucourse
from gpucourse import trainloop
from gpucourse.exercises import Case, Exercise, all_ids
from gpucourse.grading import checker


def _verdict(exercise_id, fn) -> dict:
    r = gpucourse.check(exercise_id, fn, quiet=True)
    return {"status": r.status, "cases": {c.name: c for c in r.cases}, "result": r}


# --- the judge extension ------------------------------------------------------------------------------------------


def test_judge_extension(monkeypatch):
    calls = []

    def judge(fn, params, seed):
        calls.append((params["k"], seed))
        got = fn(params["k"])
        return [] if got == 2 * params["k"] else [f"got {got}, expected {2 * params['k']}"]

    ex = Exercise(id="double", function="double", signature="double(k) -> int", statement="", kind="none",
                  make_inputs=None, reference=None, cases=(Case("one", {"k": 1}), Case("five", {"k": 5})),
                  judge=judge)
    monkeypatch.setattr(checker, "_get_exercise", lambda _id: ex)
    assert gpucourse.check("double", lambda k: 2 * k, quiet=True).passed
    r = gpucourse.check("double", lambda k: k + 1, quiet=True)
    assert r.status == "failed" and [c.passed for c in r.cases] == [True, False]
    assert r.cases[1].problems == ["got 6, expected 10"]
    assert len({s for _, s in calls}) >= 2  # each case gets its own seed

    def not_done(k):
        raise NotImplementedError

    assert gpucourse.check("double", not_done, quiet=True).status == "not implemented"
    r = gpucourse.check("double", lambda k: 1 / 0, quiet=True)
    assert r.status == "error" and "ZeroDivisionError" in r.message


def test_batch_grader_takes_judged_exercises(capsys):
    """`gpucourse grade` runs judged exercises (in its worker; tests/test_grader.py grades known submissions): the
    command line checks the files, not whether the exercise is judged."""
    from gpucourse.grading import cli

    assert cli.main(["time_gpu", "nothing.py"]) == 2
    err = capsys.readouterr().err
    assert "no such submission: nothing.py" in err and "judged" not in err


def test_new_exercises_registered():
    assert {"time_gpu", "timing_bugs", "fix_training_loop"} <= set(all_ids())


# --- time_gpu -------------------------------------------------------------------------------------------------------


def time_gpu_right(fn, *args, reps=10):
    fn(*args)
    samples = []
    for _ in range(reps):
        gpucourse.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        gpucourse.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def time_gpu_no_sync(fn, *args, reps=10):
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def time_gpu_total_over_reps(fn, *args, reps=10):  # syncs at the end only: counts earlier queued work
    fn(*args)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    gpucourse.synchronize()
    return (time.perf_counter() - t0) * 1e3 / reps


def time_gpu_mean_no_warmup(fn, *args, reps=10):
    samples = []
    for _ in range(reps):
        gpucourse.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        gpucourse.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return sum(samples) / len(samples)


def test_time_gpu_right_passes():
    v = _verdict("time_gpu", time_gpu_right)
    assert v["status"] == "passed", v["result"].report()


def test_time_gpu_one_stretched_measurement_is_measured_again():
    calls = []

    def stretched_once(fn, *args, reps=10):  # right, except that every other measurement reads 3x long
        calls.append(fn)
        ms = time_gpu_right(fn, *args, reps=reps)
        return ms * 3 if len(calls) % 2 else ms

    v = _verdict("time_gpu", stretched_once)
    assert v["status"] == "passed", v["result"].report()
    v = _verdict("time_gpu", lambda fn, *a, reps=10: time_gpu_right(fn, *a, reps=reps) * 3)  # always 3x: fails
    assert v["status"] == "failed"


def test_time_gpu_without_synchronize_fails_everywhere_with_the_reason():
    v = _verdict("time_gpu", time_gpu_no_sync)
    assert v["status"] == "failed" and not any(c.passed for c in v["cases"].values())
    assert "synchronize" in " ".join(v["cases"]["a 2 ms kernel"].problems)


def test_time_gpu_that_counts_earlier_queued_work_fails():
    v = _verdict("time_gpu", time_gpu_total_over_reps)
    case = v["cases"]["a 1 ms kernel queued behind 30 ms of earlier work"]
    assert not case.passed and "already queued" in " ".join(case.problems)


def test_time_gpu_without_warmup_using_the_mean_fails_on_slow_first_call():
    v = _verdict("time_gpu", time_gpu_mean_no_warmup)
    case = v["cases"]["a 1 ms kernel whose first call takes 60 ms more"]
    assert not case.passed and "warm-up" in " ".join(case.problems)


def test_time_gpu_bad_return_value():
    v = _verdict("time_gpu", lambda fn, *a, reps=10: "fast")
    assert v["status"] == "failed" and "finite float" in v["cases"]["a 2 ms kernel"].problems[0]


# --- timing_bugs ----------------------------------------------------------------------------------------------------


def test_timing_bugs_right_and_wrong():
    right = {"A": "no_sync", "B": "first_call", "C": "l2_cache"}
    assert _verdict("timing_bugs", lambda: right)["status"] == "passed"
    v = _verdict("timing_bugs", lambda: {"A": "no_sync", "B": "l2_cache", "C": "made_up"})
    assert [c.passed for c in v["cases"].values()] == [True, False, False]
    assert "hint" in " ".join(v["cases"]["snippet B"].problems)
    assert "not one of" in v["cases"]["snippet C"].problems[0]
    assert _verdict("timing_bugs", lambda: ["no_sync"])["status"] == "failed"


# --- fix_training_loop -----------------------------------------------------------------------------------------------


def test_every_loop_version_gives_the_same_results():
    results = []
    for fn in trainloop.STEPS.values():
        model, opt, batches = trainloop.make_problem(3, steps=6)
        results.append(trainloop.to_host(fn(model, opt, batches)))
    for r in results[1:]:
        assert torch.allclose(r["losses"], results[0]["losses"])
        assert torch.allclose(r["accuracy"].double(), results[0]["accuracy"].double())


def test_fixed_loop_passes_and_naive_versions_fail_naming_op_and_line():
    assert _verdict("fix_training_loop", trainloop.train_fixed)["status"] == "passed"
    v = _verdict("fix_training_loop", trainloop.train_async_nan_check)
    text = " ".join(v["cases"]["8 steps"].problems)
    assert v["status"] == "failed" and "Tensor.to" in text and "trainloop.py:" in text


def _submission(name: str):
    """A known submission of tests/submissions/fix_training_loop (the grader's fixtures), imported in-process."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "submissions", "fix_training_loop", name)
    spec = importlib.util.spec_from_file_location(name[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.train_fast


def test_item_in_the_loop_fails_with_op_and_line():
    v = _verdict("fix_training_loop", _submission("wrong_item_in_loop.py"))
    assert v["status"] == "failed"
    text = " ".join(v["cases"]["8 steps"].problems)
    assert "Tensor.item" in text and "wrong_item_in_loop.py:" in text
    assert "losses.append(loss.item())" in text
    assert "(x8)" in text


def train_fast_but_synchronizes_each_step(model, opt, batches):
    """train_fixed with an explicit gpucourse.synchronize() in the loop: a GPU would wait at every step."""
    dev = next(model.parameters()).device
    losses = torch.empty(len(batches), device=dev)
    correct = torch.zeros((), dtype=torch.long, device=dev)
    nan_seen = torch.zeros((), dtype=torch.bool, device=dev)
    for i, (x, y) in enumerate(batches):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        nan_seen |= torch.isnan(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[i] = loss.detach()
        correct += (logits.argmax(1) == y).sum()
        gpucourse.synchronize()  # the explicit wait the checker must see, in either mode
    return {"losses": losses, "accuracy": correct / sum(len(y) for _, y in batches), "nan_seen": nan_seen}


def test_explicit_gpucourse_synchronize_in_the_loop_fails_with_its_line():
    v = _verdict("fix_training_loop", train_fast_but_synchronizes_each_step)
    assert v["status"] == "failed"
    text = " ".join(v["cases"]["8 steps"].problems)
    assert "gpucourse.synchronize" in text and "test_lessons_01_02.py:" in text and "(x8)" in text
    assert "the explicit wait the checker must see" in text
    assert "differs from the reference" not in text  # the results are right: only the wait fails it


def test_clone_problem_copies_the_optimizer_and_its_settings():
    model, _, batches = trainloop.make_problem(4, steps=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.5, weight_decay=1e-3)
    model2, opt2, batches2 = trainloop.clone_problem(model, opt, batches)
    assert type(opt2) is type(opt) and opt2.defaults == opt.defaults and batches2 is batches
    settings = lambda o: [{k: v for k, v in g.items() if k != "params"} for g in o.param_groups]  # noqa: E731
    assert settings(opt2) == settings(opt) and settings(opt2)[0]["lr"] == 0.03
    assert [p for g in opt2.param_groups for p in g["params"]] == list(model2.parameters())
    assert not any(p is q for p, q in zip(model.parameters(), model2.parameters()))
    a = trainloop.to_host(trainloop.train_fixed(model, opt, batches))
    b = trainloop.to_host(trainloop.train_fixed(model2, opt2, batches2))
    assert torch.equal(a["losses"], b["losses"])
    opt.param_groups[0]["lr"] = 0.2  # a setting changed after construction (as a scheduler does) is copied too
    assert trainloop.clone_problem(model, opt, batches)[1].param_groups[0]["lr"] == 0.2


def train_no_sync_but_skips_training(model, opt, batches):
    """Sync-free but wrong: computes losses without stepping the optimizer."""
    dev = next(model.parameters()).device
    losses = torch.stack([F.cross_entropy(model(x.to(dev, non_blocking=True)), y.to(dev, non_blocking=True))
                          for x, y in batches]).detach()
    return {"losses": losses, "accuracy": torch.zeros((), device=dev),
            "nan_seen": torch.isnan(losses).any()}


def test_sync_free_but_wrong_results_fail():
    v = _verdict("fix_training_loop", train_no_sync_but_skips_training)
    text = " ".join(p for c in v["cases"].values() for p in c.problems)
    assert v["status"] == "failed" and "differs from the reference" in text and "synchronization" not in text


def test_nan_flag_must_be_reported():
    def never_nan(model, opt, batches):
        r = trainloop.train_fixed(model, opt, batches)
        return dict(r, nan_seen=torch.zeros_like(r["nan_seen"]))

    v = _verdict("fix_training_loop", never_nan)
    assert v["cases"]["8 steps"].passed and not v["cases"]["12 steps, NaN in batch 5"].passed


# --- benchmarks and measurements ------------------------------------------------------------------------------------


def test_pipeline_benchmarks_registered_gpu_only():
    from gpucourse import benchmarks

    reg = benchmarks.registry()
    names = [n for n in reg if n.startswith("pipeline0")]
    assert len(names) == 6 and all(reg[n]["gpu_only"] for n in names)


def test_crossover_cpu_mode_shape():
    from gpucourse import pipeline

    r = pipeline.crossover("add", sizes=[256, 1024])
    assert r["sizes"] == [256, 1024] and len(r["cpu_ms"]) == 2 and all(t > 0 for t in r["cpu_ms"])
    assert (r["gpu_ms"] is None) == (not gpucourse.on_gpu())
    with pytest.raises(ValueError):
        pipeline.crossover("conv")


@pytest.mark.gpu
def test_gpu_measurements_smoke():
    from gpucourse import pipeline

    h = pipeline.h2d_bandwidth(mbytes=64, reps=3)
    assert h["pinned, non_blocking"]["gbps"] > h["pageable"]["gbps"]
    lo = pipeline.launch_overhead(n_kernels=50, with_compile=False)
    assert lo["graph_us_per_kernel"] < lo["eager_us_per_kernel"]
    study = pipeline.training_loop_study(steps=10, reps=1)
    assert study["rows"]["3: pinned + non_blocking"]["speedup_vs_naive"] > 1.0
