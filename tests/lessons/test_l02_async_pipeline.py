"""Lesson 02: the training-loop versions, the judged exercise fix_training_loop (right and known-wrong loops), the
lesson's benchmarks and (GPU) its measurements."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gpucourse
from gpucourse.lessons.l02_async_pipeline import trainloop


def _learners_copy(fn):
    """The same loop as a new function object, as a learner who wrote it would hand in: the judge traps the course's
    own loops (grading/traps.py swaps their code while the submission runs), not a copy of their code."""
    import types

    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _verdict(exercise_id, fn) -> dict:
    r = gpucourse.check(exercise_id, fn, quiet=True)
    return {"status": r.status, "cases": {c.name: c for c in r.cases}, "result": r}


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
    assert _verdict("fix_training_loop", _learners_copy(trainloop.train_fixed))["status"] == "passed"
    v = _verdict("fix_training_loop", _learners_copy(trainloop.train_async_nan_check))
    text = " ".join(v["cases"]["8 steps"].problems)
    assert v["status"] == "failed" and "Tensor.to" in text and "trainloop.py:" in text


def _submission(name: str):
    """A known submission of tests/submissions/fix_training_loop (the grader's fixtures), imported in-process."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "submissions", "fix_training_loop", name)
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


def test_explicit_gpucourse_synchronize_in_the_loop_fails_with_its_line():
    """In-process (gpucourse.check), as a learner sees it; the grader's verdict on the same file is in expected.py."""
    v = _verdict("fix_training_loop", _submission("wrong_explicit_synchronize.py"))
    assert v["status"] == "failed"
    text = " ".join(v["cases"]["8 steps"].problems)
    assert "gpucourse.synchronize at wrong_explicit_synchronize.py:24" in text and "(x8)" in text
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
    fixed = _learners_copy(trainloop.train_fixed)

    def never_nan(model, opt, batches):
        r = fixed(model, opt, batches)
        return dict(r, nan_seen=torch.zeros_like(r["nan_seen"]))

    v = _verdict("fix_training_loop", never_nan)
    assert v["cases"]["8 steps"].passed and not v["cases"]["12 steps, NaN in batch 5"].passed


# --- gpu_idle_fraction ----------------------------------------------------------------------------------------------


def _idle_spec():
    from gpucourse.lessons.l02_async_pipeline.exercises import gpu_idle_fraction

    return gpu_idle_fraction


def _trace(trace: str, seed: int) -> tuple:
    import random

    return _idle_spec().make_inputs({"trace": trace}, random.Random(seed))


def test_idle_reference_agrees_with_the_lessons_timeline():
    """The spec's reference is the figure lesson 02 prints (gpucourse.timeline.idle_fraction), on hand-made traces
    and on every case's drawn traces."""
    from gpucourse import timeline

    ref = _idle_spec().reference
    assert ref([], 0.0, 10.0) == 1.0 and ref([(0.0, 10.0)], 0.0, 10.0) == 0.0
    assert ref([(8.0, 9.0), (2.0, 6.0), (0.0, 4.0)], 0.0, 10.0) == pytest.approx(0.3)  # unsorted, overlapping
    assert ref([(-5.0, 5.0), (12.0, 20.0)], 0.0, 10.0) == pytest.approx(0.5)  # clipped; one entirely outside
    assert ref([(1.0, 9.0), (2.0, 3.0)], 0.0, 10.0) == pytest.approx(0.2)  # nested
    assert ref([(1.0, 2.0), (2.0, 3.0), (5.0, 5.0)], 0.0, 10.0) == pytest.approx(0.8)  # touching, zero-length
    for case in _idle_spec().EXERCISE.cases:
        for seed in range(20):
            kernels, t0, t1 = _trace(case.params["trace"], seed)
            assert t1 > t0
            assert ref(kernels, t0, t1) == pytest.approx(timeline.idle_fraction(kernels, t0, t1), abs=1e-12)
            assert 0.0 <= ref(kernels, t0, t1) <= 1.0


def test_idle_traces_have_the_trait_each_case_names():
    """Each case's traces have what it is named for (so each catches its mistake), on every seed."""
    def overlaps(ks):
        ks = sorted(ks)
        return any(b[0] < a[1] for a, b in zip(ks, ks[1:]))

    for seed in range(30):
        k, t0, t1 = _trace("one stream", seed)
        assert k == sorted(k) and not overlaps(k) and t0 < k[0][0] and k[-1][1] < t1  # idle at both ends
        k, _, _ = _trace("overlapping", seed)
        assert k == sorted(k) and overlaps(k)
        k, _, _ = _trace("nested", seed)
        assert k == sorted(k) and any(a[0] < b[0] and b[1] < a[1] for a in k for b in k)
        k, t0, t1 = _trace("edges", seed)
        assert any(e <= t0 for _, e in k) and any(s >= t1 for s, _ in k)  # entirely outside, both sides
        assert any(s < t0 < e for s, e in k) and any(s < t1 < e for s, e in k)  # across both edges
        k, _, _ = _trace("unsorted", seed)
        assert k != sorted(k) and overlaps(k)
        assert _trace("empty", seed)[0] == []
        k, t0, t1 = _trace("touching", seed)
        assert any(s == e for s, e in k) and any(a[1] == b[0] and a[0] < a[1] and b[0] < b[1] for a in k for b in k)
        assert (t0, t0) in k and (t1, t1) in k
        k, t0, t1 = _trace("everything", seed)
        assert k != sorted(k) and overlaps(k) and any(s < t0 < e for s, e in k) and any(s == e for s, e in k)


def _idle_mistakes():
    spec = _idle_spec()
    return {
        "gaps": (lambda k, t0, t1: spec._gaps_only(k, t0, t1), "counts only the gaps between kernels"),
        "no max": (lambda k, t0, t1: spec._last_end(k, t0, t1), "keep the later of the two ends"),
        "busy": (lambda k, t0, t1: 1.0 - spec.reference(k, t0, t1), "that is the busy fraction"),
        "percent": (lambda k, t0, t1: 100.0 * spec.reference(k, t0, t1), "that is a percentage"),
        "microseconds": (lambda k, t0, t1: (t1 - t0) * spec.reference(k, t0, t1), "idle time in microseconds"),
    }


@pytest.mark.parametrize("mistake", ["gaps", "no max", "busy", "percent", "microseconds"])
def test_idle_common_mistakes_fail_with_their_hint(mistake):
    fn, hint = _idle_mistakes()[mistake]
    v = _verdict("gpu_idle_fraction", fn)
    failed = [c for c in v["cases"].values() if not c.passed]
    assert v["status"] == "failed" and failed
    for c in failed:  # the empty trace has its own hint, whatever the mistake
        want = "idle for the whole window: 1.0" if c.name == "no kernel at all" else hint
        assert want in " ".join(c.problems), (c.name, c.problems)


def test_idle_wrong_type_and_the_course_solution():
    v = _verdict("gpu_idle_fraction", lambda kernels, t0, t1: "0.5")
    assert v["status"] == "failed" and "expected a float in [0, 1]" in " ".join(v["cases"]["no kernel at all"].problems)
    v = _verdict("gpu_idle_fraction", lambda kernels, t0, t1: True)
    assert v["status"] == "failed" and "returned bool" in " ".join(v["cases"]["no kernel at all"].problems)

    def course(kernels, t0, t1):
        from gpucourse import timeline

        return timeline.idle_fraction(kernels, t0, t1)

    r = gpucourse.check("gpu_idle_fraction", course, quiet=True)
    assert r.status == "error" and "course's own solution" in r.message
    from gpucourse import timeline  # the trap is lifted after the call

    assert timeline.idle_fraction([(0.0, 5.0)], 0.0, 10.0) == 0.5


def test_idle_known_submissions_in_process():
    """In-process (gpucourse.check), as a learner sees it; the grader's verdicts are in
    tests/submissions/gpu_idle_fraction/expected.py."""
    import importlib.util
    import os

    def load(name):
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "submissions",
                            "gpu_idle_fraction", name)
        spec = importlib.util.spec_from_file_location(name[:-3], path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.gpu_idle_fraction

    assert _verdict("gpu_idle_fraction", load("right_merge.py"))["status"] == "passed"
    v = _verdict("gpu_idle_fraction", load("wrong_assumes_sorted.py"))
    assert [n for n, c in v["cases"].items() if not c.passed] == ["unsorted, as a trace lists them",
                                                                   "a whole trace: all of the above, unsorted"]
    r = gpucourse.check("gpu_idle_fraction", load("wrong_empty_crashes.py"), quiet=True)
    assert r.status == "error" and "no kernel at all" in r.message and "IndexError" in r.message


# --- benchmarks and measurements ------------------------------------------------------------------------------------


def test_lesson02_benchmarks_registered_gpu_only():
    from gpucourse import benchmarks

    reg = benchmarks.registry()
    names = [n for n in reg if reg[n]["lesson"] == "02"]
    assert sorted(names) == ["pipeline02_h2d", "pipeline02_launch_overhead", "pipeline02_overlap",
                             "pipeline02_training_loop"]
    assert all(reg[n]["gpu_only"] for n in names)


@pytest.mark.gpu
def test_gpu_measurements_smoke():
    from gpucourse.lessons.l02_async_pipeline import measure

    h = measure.h2d_bandwidth(mbytes=64, reps=3)
    assert h["pinned, non_blocking"]["gbps"] > h["pageable"]["gbps"]
    lo = measure.launch_overhead(n_kernels=50, with_compile=False)
    assert lo["graph_us_per_kernel"] < lo["eager_us_per_kernel"]
    study = measure.training_loop_study(steps=10, reps=1)
    assert study["rows"]["3: pinned + non_blocking"]["speedup_vs_naive"] > 1.0
