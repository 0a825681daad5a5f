"""The in-notebook checker: what `check()` says about right and wrong answers, on CPU in a second or two."""
from __future__ import annotations

import pytest
import torch

import gpucourse
from gpucourse.grading.exercise import Case, all_ids, get
from gpucourse.grading import checker, compare, guards
from submissions_util import right_submission


def _relu_ok(x):
    return torch.clamp_min(x, 0.0)


def test_registry():
    assert {"relu", "vector_add"} <= set(all_ids())
    ex = get("vector_add")
    assert ex.kind == "triton" and ex.function == "vector_add" and ex.perf.target == 0.8
    names = [c.name for c in ex.cases]
    assert {"n=1", "n just below a power of two", "n just above a power of two", "strided x[::step]",
            "large"} <= set(names)
    with pytest.raises(KeyError, match="known exercises"):
        get("nope")


def test_sizes_are_drawn_per_run_from_each_class():
    """A case's size class gives a different size for different secret seeds, the same for the same seed, and
    always one of its class; the seed never reaches the learner (the grader sends only the tensors)."""
    ex = get("vector_add")
    below = ex.case("n just below a power of two")
    sizes = {checker.make_case(ex, below, seed, 1)[0][0]["shape"][0] for seed in range(40)}
    assert len(sizes) >= 5 and all(any(n == 2**k - d for k in range(9, 13) for d in (1, 2, 3)) for n in sizes)
    assert checker.make_case(ex, below, 7, 1)[0][0]["shape"] == checker.make_case(ex, below, 7, 1)[0][0]["shape"]
    above = {checker.drawn_case(ex.case("n just above a power of two"), s, 2).params["n"] for s in range(40)}
    assert len(above) >= 5 and all(any(n == 2**k + d for k in range(9, 13) for d in (1, 2, 3)) for n in above)
    strided = checker.drawn_case(ex.case("strided x[::step]"), 3, 4)
    assert checker.drawn_note(ex, strided) == f"sizes drawn for this run: n={strided.params['n']}, " \
                                             f"step={strided.params['step']}"
    assert checker.drawn_note(ex, ex.case("n=1")) == ""  # a fixed edge class stays fixed
    if not gpucourse.on_gpu():  # more rows than any round grid cap (1024) in CPU mode too
        rows = {checker.drawn_case(get("softmax").case("many rows"), s, 10).params["rows"] for s in range(20)}
        assert min(rows) > 1024 and len(rows) > 1


def test_check_is_exported():
    assert gpucourse.check is checker.check and "check" in gpucourse.__all__


def test_correct_answer_passes(capsys):
    r = gpucourse.check("relu", _relu_ok)
    assert r.passed and r.status == "passed" and len(r.cases) == len(get("relu").cases)
    assert "all 6 cases passed" in capsys.readouterr().out


def test_first_bad_index_and_errors_are_reported():
    def off_by_one(x):
        out = torch.clamp_min(x, 0.0).reshape(-1).clone()
        out[5:] += 1.0
        return out.reshape(x.shape)

    r = checker.check("relu", off_by_one, quiet=True)
    assert r.status == "failed"
    case = next(c for c in r.cases if c.name == "n=1023 with zeros")
    text = "\n".join(case.problems)
    assert "first mismatches: [5] expected" in text and "max abs error 1" in text


def test_elements_never_written_tail():
    def tail_unwritten(x):
        out = torch.empty_like(x)
        flat = out.reshape(-1)
        n = flat.numel()
        flat[: n - n // 3] = torch.clamp_min(x.reshape(-1)[: n - n // 3], 0.0)
        return out

    r = checker.check("relu", tail_unwritten, quiet=True)
    case = next(c for c in r.cases if c.name == "n=1023 with zeros")
    assert "elements never written: 341 of 1023" in case.problems[0] and "tail from index 682" in case.problems[0]


def test_zeros_never_pass_and_nan_is_not_a_wildcard():
    exp = torch.tensor([1.0, 2.0, 3.0])
    assert not compare.compare_values(exp, torch.zeros(3), 1e-3, 1e-3).ok
    nan = compare.compare_values(exp, torch.tensor([1.0, float("nan"), 3.0]), 1.0, 1.0)
    assert not nan.ok and "1 NaN" in nan.text()
    assert not compare.compare_values(torch.zeros(3), torch.full((3,), float("nan")), 1.0, 1.0).ok
    assert compare.compare_values(exp, exp.clone(), 0.0, 0.0).ok


def test_wrong_dtype_is_named():
    r = checker.check("relu", lambda x: torch.relu(x).double(), quiet=True)
    assert r.status == "failed"
    assert "wrong dtype: expected float32, got float64" in r.cases[0].problems


def test_wrong_shape_and_none_are_named():
    r = checker.check("relu", lambda x: torch.relu(x).reshape(-1, 1), quiet=True)
    assert any("wrong shape" in p for p in r.cases[0].problems)
    r = checker.check("relu", lambda x: None, quiet=True)
    assert "returned None" in r.cases[0].problems[0]


def test_fp16_hint():
    r = checker.check("relu", lambda x: torch.relu(x).half().float(), quiet=True)
    hints = [h for c in r.cases for h in c.hints]
    assert any("fp16" in h for h in hints)


def test_modified_input_is_caught():
    r = checker.check("relu", lambda x: x.relu_(), quiet=True)
    assert r.status == "failed" and any("modified its input" in p for c in r.cases for p in c.problems)


def test_kernel_not_launched_message(capsys):
    r = checker.check("vector_add", lambda x, y: x + y)
    assert r.status == "failed"
    assert all("no Triton kernel was launched" in c.problems[0] for c in r.cases)
    assert "x + y do not count" in capsys.readouterr().out


def test_triton_answer_passes_and_launches_are_counted():
    vector_add = right_submission("right_strided_kernel.py")

    r = checker.check("vector_add", vector_add, quiet=True)
    assert r.passed, r.report()
    ex = get("vector_add")
    args, _ = checker.make_case(ex, ex.cases[0], 1, 0)
    info = checker.run_call(ex, vector_add, checker.to_device(args, gpucourse.torch_device()))
    assert info["triton_launches"] == {"add_kernel": 1}


def test_learner_exception_is_their_traceback():
    def buggy(x):
        return x[10**9]

    r = checker.check("relu", buggy, quiet=True)
    assert r.status == "error"
    assert "IndexError" in r.message and "in buggy" in r.message
    assert "gpucourse/grading" not in r.message  # the checker's own frames are left out


def test_not_implemented_does_not_raise(capsys):
    def stub(x):
        # YOUR CODE HERE
        raise NotImplementedError

    r = gpucourse.check("relu", stub)
    assert r.status == "not implemented" and not r.passed
    assert "not implemented yet" in capsys.readouterr().out
    assert f"relu {checker.NOT_IMPLEMENTED}" in r.message
    r = gpucourse.check("block_sum", lambda x: stub(x), quiet=True)  # CPU mode: through cuda_check
    assert r.status == "not implemented" and f"block_sum {checker.NOT_IMPLEMENTED}" in r.message


def test_fresh_inputs_every_call():
    seen = []
    checker.check("relu", lambda x: seen.append(x.clone()) or torch.relu(x), quiet=True)
    checker.check("relu", lambda x: seen.append(x.clone()) or torch.relu(x), quiet=True)
    first, second = seen[1], seen[len(seen) // 2 + 1]
    assert first.shape == second.shape and not torch.equal(first, second)


def test_canaries_catch_out_of_bounds_writes():
    x = torch.randn(10)[::2]
    arg = guards.guarded(x)
    buf = arg["buffer"].clone()
    assert guards.canary_damage(arg, buf) == []
    buf[arg["offset"] + 1] = 0.0  # the gap between elements 0 and 1 of the strided view
    buf[arg["offset"] + 9] = 0.0  # just past the last element
    assert guards.canary_damage(arg, buf) == [1, 9]
    assert torch.equal(guards.view_of(arg), x)


def test_poisoned_allocation_overrun_is_reported():
    original = torch.empty
    with guards.poisoned_allocations() as records:
        out = torch.empty(8)
        assert bool(guards.is_poison(out).all())
        torch.as_strided(out, (10,), (1,)).fill_(1.0)  # 2 elements into the guard band after the 8
    assert torch.empty is original  # the wrapper is removed afterwards
    assert guards.overruns(records)[0].startswith("wrote 2 element(s) past the end of a 8-element output")


def test_determinism_check():
    ex = get("vector_add")
    case = Case("tiny", {"n": 4})
    args, expected = checker.make_case(ex, case, 3, 0)
    noisy = {"out": expected.clone(), "out2": expected.clone() + 1e-7, "buffers_after": [None, None],
             "triton_launches": {"k": 1}, "cuda_launches": {}, "overruns": []}
    verdict = checker.evaluate(ex, case, args, expected, noisy, "cpu")
    assert not verdict.passed and "nondeterministic" in verdict.problems[0]


def test_where_map_for_2d_outputs():
    """A failed 2-D case carries a where map of the output's shape, drawn as a heatmap (tests/test_drawing.py draws
    the other shapes and categories)."""
    import matplotlib

    matplotlib.use("Agg")
    from gpucourse.grading import drawing

    def half_wrong(x):
        out = torch.relu(x).clone()
        if out.dim() == 2:
            out[: out.shape[0] // 2] = -1.0
        return out

    r = checker.check("relu", half_wrong, quiet=True)
    case = next(c for c in r.cases if c.name == "2-D 37x64")
    assert case.where is not None and tuple(case.where.codes.shape) == (37, 64)
    assert (case.where.n_wrong, case.where.n_right, case.where.n_never) == (18 * 64, 19 * 64, 0)
    assert bool((case.where.codes[:18] == compare.WRONG).all()) and bool((case.where.codes[18:] == compare.RIGHT).all())
    fig = drawing.draw(case.where, "relu", case.name)
    assert fig.axes[0].get_title().startswith("relu, case '2-D 37x64': where the output is wrong")
    assert all(c.where is None for c in r.cases if c.passed)


def test_sparse_and_meta_outputs_are_the_learners_problem():
    r = checker.check("relu", lambda x: torch.relu(x).to_sparse(), quiet=True)  # raised CheckerError before
    assert r.status == "failed" and all("layout sparse_coo" in c.problems[0] for c in r.cases)
    r = checker.check("relu", lambda x: torch.relu(x).to("meta"), quiet=True)
    assert r.status == "failed" and all("meta device" in c.problems[0] for c in r.cases)


def test_determinism_run_gets_its_own_copy_of_tensors_in_lists():
    """sum_many's argument is a list of tensors: a call that changes them in place must not change the inputs of
    the second (determinism) call."""
    ex = get("sum_many")
    args, _ = checker.make_case(ex, Case("three", {"count": 3, "min_len": 4, "max_len": 4}), 5, 0)
    args = checker.to_device(args, "cpu")
    copy = checker.clone_args(args)
    assert all(a is not b for a, b in zip(args[0]["value"], copy[0]["value"]))

    def sums_then_scribbles(tensors):
        out = torch.stack([t.sum() for t in tensors])
        for t in tensors:
            t.add_(1.0)
        return out

    outcome = checker.run_case(ex, sums_then_scribbles, args)
    assert torch.equal(outcome["out"], outcome["out2"])


def test_block_sum_statement_asks_for_the_shape_it_checks():
    ex = get("block_sum")
    assert "(1,)" not in ex.statement and "0-d float32 tensor (shape `()`" in ex.statement
    args, expected = checker.make_case(ex, ex.cases[2], 1, 2)
    assert tuple(expected.shape) == ()


def test_timing_bugs_judge_rejects_unhashable_answers():
    from gpucourse.lessons.l01_cpu_vs_gpu_timing.exercises import timing_bugs

    problems = timing_bugs.judge(lambda: {"A": ["no_sync"], "B": "first_call"}, {"snippet": "A"}, 0)
    assert problems == [f"['no_sync'] is not one of {sorted(timing_bugs.BUGS)}"]
    assert timing_bugs.judge(lambda: {"A": "no_sync"}, {"snippet": "A"}, 0) == []


def test_measure_perf_declares_flops_and_times_the_copy_baseline(monkeypatch):
    """measure_perf runs on a GPU only: here bench and copy_gbps are stand-ins that record what they are given."""
    import dataclasses

    from gpucourse import timing
    from gpucourse.grading.exercise import Perf

    matmul, vector_add = get("matmul"), get("vector_add")  # loaded before the patches below (they read the mode)
    calls, copies, flushes, copy_flushes = [], [], [], []

    def fake_bench(fn, *args, bytes=None, flops=None, dtype=None, name=None, **kwargs):
        calls.append({"name": name, "flops": flops, "dtype": dtype})
        flushes.append(kwargs.get("flush_l2"))
        result = timing.BenchResult(name=name, samples=[1.0], mode="gpu", bytes=bytes, flops=flops,
                                    dtype=None if dtype is None else str(dtype).replace("torch.", ""),
                                    peak_gbs=1.0, peak_tflops=1e-6)  # tiny peaks: any declared work is above them
        result.warnings.extend(timing.peak_check(result))
        return result

    monkeypatch.setattr(timing, "bench", fake_bench)
    monkeypatch.setattr(timing, "copy_gbps",
                        lambda nbytes, **kw: copies.append(nbytes) or copy_flushes.append(kw.get("flush_l2")) or 4.0)
    monkeypatch.setattr(checker._device, "on_gpu", lambda: True)
    monkeypatch.setattr(checker._device, "torch_device", lambda: torch.device("cpu"))

    small = dataclasses.replace(matmul, perf=dataclasses.replace(matmul.perf, params={"m": 8, "n": 4, "k": 16}))
    p = checker.measure_perf(small, lambda a, b: a @ b)
    assert calls[0] == {"name": "matmul", "flops": 2 * 8 * 4 * 16, "dtype": torch.float16}
    assert p["suspicious"] and any("TFLOP/s is above" in w for w in p["warnings"])

    small = dataclasses.replace(vector_add, perf=Perf(baseline="copy", target=0.8, params={"n": 1000},
                                                      bytes=vector_add.perf.bytes))
    p = checker.measure_perf(small, lambda x, y: x + y)
    assert copies == [12_000 // 2] and "a torch copy of the same bytes (4 GB/s)" in p["text"]
    assert flushes == [True, True, True] and copy_flushes == [True]  # do_bench's write flush unless the spec says
    # The GEMV exercises flush L2 by reading, as lesson 07 does, for the kernel and its baseline alike (issue 31).
    for name in ("int8_gemv", "int4_gemv"):
        assert get(name).perf.flush_l2 == "read", name
    read = dataclasses.replace(small, perf=dataclasses.replace(small.perf, flush_l2="read"))
    checker.measure_perf(read, lambda x, y: x + y)
    assert flushes[-1] == "read" and copy_flushes[-1] == "read"


def test_an_autotuned_kernel_runs_in_cpu_mode_and_says_what_it_did(capsys):
    """@triton.autotune needs a GPU to time its configs; in CPU mode the first config runs, with one note."""
    autotuned = right_submission("right_autotuned.py")
    r = gpucourse.check("vector_add", autotuned, quiet=True)
    assert r.passed, r.report()
    out = capsys.readouterr().out
    if not gpucourse.on_gpu():
        assert out.count("@triton.autotune on add_kernel used the first of its 2 configs") == 1
        assert "timing configs needs a GPU" in out


def test_empty_like_of_a_strided_input_is_guarded_too():
    """An unmasked store past an output made by torch.empty_like(x[::2]) lands in a guard band (it used to corrupt
    the heap and kill the process in CPU mode); a transposed input keeps its strides, as torch.empty_like does."""
    from gpucourse.grading import guards

    a = torch.randn(64)
    with guards.poisoned_allocations() as records:
        out = torch.empty_like(a[::2])
        t = torch.empty_like(torch.randn(4, 6).t())
    assert out.is_contiguous() and out.shape == (32,) and len(records) == 2
    assert t.stride() == (1, 6) and t.shape == (6, 4)
    assert guards.dense(torch.randn(4, 6).t()) and not guards.dense(a[::2]) and guards.dense(torch.randn(1, 5)[:, :])
    buf, n = records[0]
    buf[n:n + 3] = 0  # what an unmasked store past the end does
    assert "wrote 3 element(s) past the end of a 32-element output" in " ".join(guards.overruns(records))


# Issue 17: the answer must come from the learner's kernel. In-process (the grader's verdicts on the same attacks are
# the known submissions' cheat_* files).

def _triton():
    return pytest.importorskip("triton")


def _sum_exercise(allowed=()):
    from gpucourse.grading.exercise import Exercise, Tolerance

    return Exercise(id="vector_add", function="total", signature="total(x)", statement="", kind="triton",
                    make_inputs=lambda p, g: (torch.randn(p["n"], generator=g),),
                    reference=lambda x: x.double().sum().float(), cases=(Case("n=3000", {"n": 3000}),),
                    tolerance={"float32": Tolerance(1e-5, 1e-5)}, determinism=None, allowed_ops=allowed)


def _verdict(ex, fn):
    case = ex.cases[0]
    args, expected = checker.make_case(ex, case, 5, 0)
    outcome = checker.run_case(ex, fn, checker.to_device(args, gpucourse.torch_device()))
    return checker.evaluate(ex, case, args, expected, outcome, gpucourse.torch_device().type)


def test_allowed_ops_apply_to_derived_results_only():
    """An exercise may allow an op (here aten.sum) on what its kernels computed, never on the inputs themselves;
    every other torch compute op on the inputs or on their copies fails, naming the op."""
    _triton()
    import triton
    import triton.language as tl

    @triton.jit
    def partial_sums(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0)))

    def partials_then_torch_sum(x):
        parts = torch.empty(triton.cdiv(x.numel(), 1024), device=x.device)
        partial_sums[(parts.numel(),)](x, parts, x.numel(), BLOCK=1024)
        return parts.sum()

    def launch_then_sum_the_input(x):
        parts = torch.empty(triton.cdiv(x.numel(), 1024), device=x.device)
        partial_sums[(parts.numel(),)](x, parts, x.numel(), BLOCK=1024)
        return x.contiguous().sum()  # a copy of the input is still the input's data

    allowing = _sum_exercise(allowed=("aten.sum",))
    assert _verdict(allowing, partials_then_torch_sum).passed
    problems = _verdict(allowing, launch_then_sum_the_input).problems
    assert any("aten.sum on an input" in p for p in problems), problems
    problems = _verdict(_sum_exercise(), partials_then_torch_sum).problems  # not allowed: named
    assert any("derived from them: aten.sum" in p for p in problems), problems


def test_an_answer_right_with_every_launch_skipped_fails():
    """NumPy is invisible to torch's dispatcher: the call made with every Triton launch skipped gives it away."""
    _triton()
    import triton

    @triton.jit
    def nothing(x_ptr, n):
        pass

    def numpy_sum(x):
        nothing[(1,)](x, x.numel())
        return torch.tensor(float(x.cpu().numpy().sum(dtype="float64")), dtype=torch.float32, device=x.device)

    problems = _verdict(_sum_exercise(), numpy_sum).problems
    assert any("with every Triton launch skipped" in p for p in problems), problems


def test_course_solutions_raise_while_trapped_and_come_back():
    from gpucourse.grading.traps import trapped
    from gpucourse.lessons.l06_tensor_cores import waves

    want = waves.gemm_waves(1000, 1000, 128, 128, 132)
    alias = waves.gemm_waves  # what `from ... import gemm_waves` binds
    with trapped(waves.gemm_waves):
        with pytest.raises(RuntimeError, match="waves.gemm_waves is the course's own solution"):
            alias(1000, 1000, 128, 128, 132)
    assert alias(1000, 1000, 128, 128, 132) == want


def test_methods_set_on_objects_the_course_holds_are_put_back():
    """A judge's helpers live in objects (the stand-in device queue): a method replaced on the object itself is
    undone by the worker's restore, and reported."""
    from gpucourse import asyncqueue
    from gpucourse.grading import judging

    q = asyncqueue._cpu_queue() if not gpucourse.on_gpu() else None
    if q is None:
        pytest.skip("the stand-in queue exists in CPU mode only")
    snap = judging.Snapshot()
    q.put = lambda *a, **k: None
    changed = snap.restore()
    assert "put" not in vars(q) and any("gpucourse.asyncqueue._queue.put" in c for c in changed), changed


def test_a_judge_whose_deadline_passes_gives_the_timeout_verdict(monkeypatch, capsys):
    """A judge raising JudgeTimeout (ring_all_reduce's ranks waiting on each other) makes check's status "timeout",
    its report says the function did not return in time and keeps the judge's message; the cases after it do not
    run. (The batch grader's side: tests/submissions/ring_all_reduce/wrong_recv_before_send.py.)"""
    from gpucourse.grading import exercise as exmod

    calls = []

    def judge(fn, params, seed):
        calls.append(params["n"])
        if params["n"] == 2:
            raise exmod.JudgeTimeout("timed out after 10 s: a deadlock?")
        return []

    fake = exmod.JudgedExercise(id="fake_judged", function="f", signature="f()", statement="", kind="none",
                                cases=tuple(exmod.Case(f"n={n}", {"n": n}) for n in (1, 2, 3)), judge=judge)
    monkeypatch.setattr(checker, "_get_exercise", lambda exercise_id: fake)
    r = checker.check("fake_judged", lambda: None)
    out = capsys.readouterr().out
    assert r.status == "timeout" and not r.passed and calls == [1, 2]
    assert [c.passed for c in r.cases] == [True, False]
    assert "fake_judged: your function did not return in time" in out and "a deadlock?" in out


# --- issue 39, class 11: messages that lead the learner the right way ----------------------------------------------


def test_integer_output_reports_counts_and_differences_not_a_relative_error():
    expected = torch.tensor([0, 0, 3, -2, 7], dtype=torch.int8)
    got = torch.tensor([0, 1, 3, -2, 9], dtype=torch.int8)
    m = compare.compare_values(expected, got, 0.0, 0.0)
    assert not m.ok and m.n_bad == 2
    assert m.problems == ["2 of 5 integer elements differ (first mismatches: [1] expected 0 got 1, [4] expected 7 "
                          "got 9); 1 off by 1, 1 by more; max difference 2 (integer output: must match exactly)"]
    assert "rel error" not in m.text()


def test_out_of_bounds_writes_lead_and_zeros_are_not_blamed_on_a_zero_initialised_output():
    """Wrong zeros beside a write past the end: the write leads, the zero-initialisation guess is not made."""
    ex = get("vector_add")
    case = next(c for c in ex.cases if checker.make_case(ex, c, 1, 0)[1].numel() >= 8)
    args, expected = checker.make_case(ex, case, 1, 0)
    out = expected.clone()
    out[:3] = 0
    past = "wrote 4 element(s) past the end of a 1-element output it allocated (up to index 4): mask the stores"
    outcome = {"out": out, "buffers_after": [None] * len(args), "triton_launches": {"k": 1}, "overruns": [past]}
    r = checker.evaluate(ex, case, args, expected, outcome, "cpu")
    assert not r.passed and r.problems[0] == past
    assert not any("zero-initialised" in p for p in r.problems)
    r = checker.evaluate(ex, case, args, expected, dict(outcome, overruns=[]), "cpu")
    assert "elements never written into a zero-initialised output?" in r.problems[0]


def test_a_course_kernel_launched_is_named_not_no_kernel_launched():
    ex = get("int8_gemv")
    args, expected = checker.make_case(ex, ex.cases[0], 1, 0)
    outcome = {"out": expected.clone(), "buffers_after": [None] * len(args), "triton_launches": {},
               "course_launches": {"w8a16_kernel": 1}}
    r = checker.evaluate(ex, ex.cases[0], args, expected, outcome, "cpu")
    assert not r.passed and r.problems == [
        "used the course's own code: launched the course's kernel w8a16_kernel (the instructor's, defined in the "
        "gpucourse package), not a kernel of your own: write and launch your own"]


def test_a_forbidden_op_fails_the_case_naming_it_whatever_reached_it():
    """int8_gemv forbids torch's matmuls (issue 39): recorded on anything, laundered copies included."""
    ex = get("int8_gemv")
    args, expected = checker.make_case(ex, ex.cases[0], 1, 0)
    outcome = {"out": expected.clone(), "buffers_after": [None] * len(args), "triton_launches": {"copy": 1},
               "ops": {"aten.mm.default": 1}}
    r = checker.evaluate(ex, ex.cases[0], args, expected, outcome, "cpu")
    assert not r.passed and r.problems[0].startswith(
        "calls aten.mm.default: this exercise asks for your own kernel to compute the answer, not this torch op")


# Issue 35 item 8: hints chosen for the mistake, in the checker's mechanism (compare, checker, Exercise.hints).


def test_strided_hint_names_the_non_contiguous_inputs():
    x = torch.randn(20)[::2]
    args = [guards.guarded(x), guards.guarded(torch.randn(10))]
    hint = checker.strided_hint(args)
    assert "not contiguous, so your kernel must use their strides (argument 1 has shape (10,) and strides (2,))" \
        in hint and "argument 2" not in hint
    assert checker.strided_hint([guards.guarded(torch.randn(10))]) == ""


def test_online_softmax_rows_too_small_get_the_rescale_hint_not_the_padding_one():
    e = torch.softmax(torch.randn(4, 32, dtype=torch.float64), dim=-1).float()
    g = e * torch.tensor([0.5, 0.7, 0.9, 0.6])[:, None]
    default = compare.compare_values(e, g, 1e-5, 1e-6)
    online = compare.compare_values(e, g, 1e-5, 1e-6, row_sum_cause=compare.ROW_SUM_NOT_RESCALED)
    assert "masked-off lanes must load -inf" in default.problems[0]
    assert "running maximum that changes must rescale" in online.problems[0] and "-inf" not in online.problems[0]


def test_a_forbidden_op_before_a_raise_is_the_verdict_and_the_next_cases_run(capsys):
    """check() in a notebook says what the grader says (tests/submissions/int8_gemv/cheat_mm_then_raises.py): a
    function that calls a forbidden torch op and then raises fails that case for the op, with the raise told beside
    it, and the other cases are checked; a plain raise stays an error with the learner's traceback."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "submissions", "int8_gemv", "cheat_mm_then_raises.py")
    spec = importlib.util.spec_from_file_location("cheat_mm_then_raises", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    result = gpucourse.check("int8_gemv", mod.int8_gemv, plot=False)
    assert result.status == "failed" and len(result.cases) == len(get("int8_gemv").cases)
    first = result.cases[0]
    assert first.problems[0].startswith("calls aten.mm.default: this exercise asks for your own kernel")
    assert first.problems[0].endswith("it then raised ValueError: K=512: this path wants K a multiple of 1024")
    big_k = next(c for c in result.cases if c.name == "M=2, cancelling halves, K=4096")  # no raise: evaluated
    assert "it then raised" not in " ".join(big_k.problems) and "calls aten.mm.default" in " ".join(big_k.problems)
    assert "it then raised ValueError" in capsys.readouterr().out

    def plain_raise(x, q, scale):
        raise ValueError("not written yet for this shape")
    result = gpucourse.check("int8_gemv", plain_raise, plot=False)
    assert result.status == "error" and "not written yet for this shape" in result.message


# --- the two forms of an exercise, and the checker's modules ---------------------------------------------------------


def test_an_exercise_is_compared_or_judged_and_each_form_requires_its_functions():
    """A compared exercise must give make_inputs and reference (its judge is None); a judged one must give a judge
    (it has no make_inputs or reference), and a speed target of its own inputs against the copy baseline."""
    from gpucourse.grading import exercise as exmod

    common = dict(id="x", function="x", signature="x()", statement="", kind="none", cases=(Case("one", {}),))
    with pytest.raises(TypeError, match="make_inputs.*reference"):
        exmod.Exercise(**common)
    with pytest.raises(TypeError, match="judge"):
        exmod.JudgedExercise(**common)
    with pytest.raises(TypeError, match="make_inputs"):
        exmod.JudgedExercise(**common, judge=lambda fn, params, seed: [], make_inputs=lambda p, g: ())
    compared = exmod.Exercise(**common, make_inputs=lambda p, g: (), reference=lambda: 0)
    judged = exmod.JudgedExercise(**common, judge=lambda fn, params, seed: [])
    assert compared.judge is None and judged.judge is not None and not hasattr(judged, "reference")
    with pytest.raises(ValueError, match="needs its own make_inputs"):
        exmod.JudgedExercise(**common, judge=judged.judge, perf=exmod.Perf(baseline="copy", target=1, params={}))
    with pytest.raises(ValueError, match="'copy' baseline"):
        exmod.JudgedExercise(**common, judge=judged.judge, perf=exmod.Perf(baseline="reference", target=1, params={},
                                                                           make_inputs=lambda p, g: ()))
    with pytest.raises(ValueError, match="kind must be one of"):
        exmod.JudgedExercise(**dict(common, kind="ptx"), judge=judged.judge)
    with pytest.raises(ValueError, match="determinism must be"):
        exmod.Exercise(**common, make_inputs=lambda p, g: (), reference=lambda: 0, determinism="sometimes")


def test_every_spec_gives_the_functions_of_its_form():
    """No spec passes None for a function its form needs: compared specs have callable make_inputs and reference,
    judged ones a callable judge; both forms are found (the registry holds each kind)."""
    from gpucourse.grading import exercise as exmod

    forms = set()
    for ex_id in all_ids():
        ex = get(ex_id)
        forms.add(type(ex))
        if isinstance(ex, exmod.JudgedExercise):
            assert callable(ex.judge), ex_id
        else:
            assert isinstance(ex, exmod.Exercise), ex_id
            assert callable(ex.make_inputs) and callable(ex.reference) and ex.judge is None, ex_id
    assert forms == {exmod.Exercise, exmod.JudgedExercise}


def test_a_judged_exercise_times_its_own_inputs(monkeypatch):
    """draw_perf takes a judged exercise's inputs from its Perf (fused_rmsnorm_residual has a speed target and no
    make_inputs of its own), a compared exercise's from the exercise."""
    rms = get("fused_rmsnorm_residual")
    assert rms.judge is not None and rms.perf.make_inputs is not None
    seen = []

    def make(params, gen):
        seen.append(params)
        return (torch.zeros(2),)

    import dataclasses

    from gpucourse.grading.exercise import Perf

    small = dataclasses.replace(rms, perf=Perf(baseline="copy", target=0.85, params={"shape": (2, 3)},
                                               make_inputs=make))
    monkeypatch.setattr(checker._device, "on_gpu", lambda: True)
    (x,) = checker.draw_perf(small)
    assert seen == [{"shape": (2, 3)}] and torch.equal(x, torch.zeros(2))
    vector_add = get("vector_add")
    args = checker.draw_perf(dataclasses.replace(vector_add, perf=dataclasses.replace(vector_add.perf,
                                                                                     params={"n": 5})))
    assert [tuple(a.shape) for a in args[:2]] == [(5,), (5,)]


def test_the_checker_module_still_offers_every_piece_it_was_split_into():
    """checker.py is the entry point and keeps the names the grader, the worker, the specs and the tests import from
    it: each is the very object of the module that now holds it."""
    from gpucourse.grading import check_call, check_cases, check_perf, check_verdict

    homes = (check_call, check_cases, check_perf, check_verdict)
    for name in checker.__all__:
        obj = getattr(checker, name)
        home = [m for m in homes if getattr(m, name, None) is obj]
        assert home or name in ("CheckResult", "CheckerError", "check"), name
    assert checker.evaluate is check_verdict.evaluate and checker.make_case is check_cases.make_case
