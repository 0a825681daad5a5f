"""Lesson 09: the fused RMSNorm kernel (in the interpreter in CPU mode) against float64, the trace reader and its
generator, the judges of both exercises on known submissions (in-process; tests/test_known_submissions.py grades
every one of them through the batch grader), torch.compile's structure as the notebook shows it, and the benchmark
targets."""
import collections
import math

import pytest
import torch

import gpucourse
from gpucourse.grading import checker, launches
from gpucourse.lessons.l09_compile_profiling import bench, kernels, measure, readtrace, recorded
from gpucourse.lessons.l09_compile_profiling.exercises import fused_rmsnorm_residual as rms_ex
from gpucourse.lessons.l09_compile_profiling.exercises import read_the_profile as prof_ex
from tests.submissions_util import right_submission

DEV = gpucourse.torch_device()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 37, 1000, 4099])
def test_fused_kernel_matches_float64(dtype, n):
    torch.manual_seed(n)
    x, r = (torch.randn(3, 2, n, device=DEV).to(dtype) for _ in range(2))
    w = torch.randn(n, device=DEV).to(dtype)
    out, s = kernels.fused_rmsnorm_residual(x, r, w, 1e-5)
    ref_out, ref_s = rms_ex.reference(x.cpu(), r.cpu(), w.cpu(), 1e-5)
    assert out.shape == x.shape and s.shape == x.shape and out.dtype == dtype
    if dtype == torch.bfloat16 and not gpucourse.on_gpu():
        # Triton's interpreter may not round float32 -> bfloat16 to nearest: within one unit of bf16 there
        assert float((s.cpu().float() - ref_s.float()).abs().max()) <= 2**-7 * float(ref_s.float().abs().max())
    else:
        assert torch.equal(s.cpu(), ref_s)  # the sum, rounded once, is exact
    tol = rms_ex.EXERCISE.tolerance_for(dtype)
    err = (out.cpu().double() - ref_out.double()).abs()
    assert bool((err <= tol.rtol * ref_out.double().abs() + tol.atol_scale * float(ref_out.double().abs().max())).all())


def test_torch_version_is_the_same_function():
    x, r = torch.randn(5, 300, dtype=torch.float64), torch.randn(5, 300, dtype=torch.float64)
    w = torch.randn(300, dtype=torch.float64)
    out, s = kernels.rmsnorm_residual_torch(x, r, w, 1e-6)
    ref_out, ref_s = rms_ex.reference(x, r, w, 1e-6)
    assert torch.allclose(out, ref_out, rtol=1e-6) and torch.equal(s, ref_s)  # it normalises in float32


def test_moved_bytes_reads_two_and_writes_two():
    x = torch.empty(4, 10, dtype=torch.bfloat16)
    assert kernels.moved_bytes(x, x, torch.empty(10, dtype=torch.bfloat16)) == 4 * 40 * 2 + 20


def test_restated_lesson05_kernels():
    x = torch.randn(5, 333, device=DEV)
    assert torch.allclose(kernels.softmax(x), torch.softmax(x, -1), atol=1e-6)
    a, b, bias = measure.epilogue_inputs(33, 40, 50, torch.float32)
    a64, b64, bias64 = a.double(), b.double(), bias.double()
    # float32 tl.dot runs on TF32 tensor cores on a GPU (10-bit mantissa): about 1e-3 of the largest value there
    tol = 4e-3 if gpucourse.on_gpu() else 1e-5
    for got, want in ((kernels.matmul_bias_gelu(a, b, bias), kernels.bias_gelu_torch(a64, b64, bias64)),
                      (kernels.matmul_bias_gelu(a, b, bias, epilogue=False), a64 @ b64)):
        assert float((got.double() - want).abs().max()) <= tol * float(want.abs().max())


# -- the trace reader ---------------------------------------------------------------------------------------------


def _ev(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7, "args": args}


def test_reader_on_a_hand_made_trace():
    events = [_ev("kernel", "a", 0, 10), _ev("kernel", "b", 10, 5), _ev("kernel", "b", 30, 5),
              _ev("kernel", "b", 40, 5), _ev("gpu_memcpy", "copy", 32, 6),  # overlaps b at 30..35
              _ev("cpu_op", "aten::item", 0, 100, line="t.py:9"),
              _ev("cuda_runtime", "cudaStreamSynchronize", 20, 30, line="t.py:9"),
              _ev("cuda_runtime", "cudaMemcpyAsync", 1, 2, line="t.py:3")]
    assert readtrace.kernel_table(events) == [("b", 15.0, 3), ("a", 10.0, 1)]
    # window 0..45; busy 0..15, 30..38, 40..45 = 28; idle 17/45
    assert math.isclose(readtrace.gpu_idle_share(events), 17 / 45)
    assert readtrace.sync_lines(events) == [("t.py:9", 1, 30.0)]
    assert readtrace.answers(events) == {"top_kernel": "b", "idle_share": readtrace.gpu_idle_share(events),
                                         "sync_line": "t.py:9"}


def test_generated_traces_hide_the_bottleneck_and_vary_with_the_seed():
    seen = set()
    for seed in range(12):
        g = readtrace.generate(seed, iters=4)
        assert g == readtrace.generate(seed, iters=4)  # the seed decides everything
        table = readtrace.kernel_table(g["events"])
        by_count = max(table, key=lambda t: t[2])[0]
        assert g["answers"]["top_kernel"] == g["heavy"] != by_count == g["many"]
        assert table[0][1] > 1.2 * table[1][1]  # a clear winner by time
        assert 0.05 < g["answers"]["idle_share"] < 0.95
        assert g["answers"]["sync_line"] == g["lines"]["sync"] != g["lines"]["copy"]
        seen.add((g["answers"]["top_kernel"], g["answers"]["sync_line"]))
    assert len(seen) >= 8


def test_overlapping_streams_make_summing_wrong_only_with_prefetch():
    for prefetch in (True, False):
        events = readtrace.generate(5, iters=4, prefetch=prefetch)["events"]
        summed = prof_ex._summed_idle(events)
        truth = readtrace.gpu_idle_share(events)
        assert (abs(summed - truth) > prof_ex.IDLE_TOL) == prefetch


# -- the judges, in-process --------------------------------------------------------------------------------------


def _judge_all(ex, fn) -> dict:
    seed = checker.new_seed()
    return {c.name: ex.judge(fn, c.params, checker.case_seed(seed, i)) for i, c in enumerate(ex.EXERCISE.cases)}


def test_read_the_profile_judge():
    right = right_submission("right_reads_the_trace.py", "read_the_profile")
    assert all(p == [] for p in _judge_all(prof_ex, right).values())
    count = right_submission("wrong_top_kernel_by_count.py", "read_the_profile")
    assert all(any("most launched kernel" in p for p in ps) for ps in _judge_all(prof_ex, count).values())
    pct = lambda trace: dict(right(trace), idle_share=100 * right(trace)["idle_share"])  # noqa: E731
    assert all(any("a percentage?" in p for p in ps) for ps in _judge_all(prof_ex, pct).values())
    assert _judge_all(prof_ex, lambda t: [1])["4 steps, batch copies on a second stream"] == [
        "returned list, expected a dict with keys top_kernel, idle_share, sync_line"]


def test_read_the_profile_traps_the_course_reader():
    with pytest.raises(RuntimeError, match="course's own solution"):
        prof_ex.judge(lambda t: readtrace.answers(t), prof_ex.EXERCISE.cases[0].params, 1)


def test_fused_rmsnorm_residual_judge_passes_the_right_one_and_names_each_output():
    right = right_submission("right_one_kernel.py", "fused_rmsnorm_residual")
    assert all(p == [] for p in _judge_all(rms_ex, right).values())

    def swapped(x, r, w, eps):
        out, s = right(x, r, w, eps)
        return s, out
    problems = _judge_all(rms_ex, swapped)["ragged n, float32"]
    assert any(p.startswith("out: ") for p in problems) and any(p.startswith("new_residual: ") for p in problems)
    assert _judge_all(rms_ex, lambda *a: right(*a)[0])["1 row of 1"][0].startswith("returned Tensor, expected a pair")


def test_fused_rmsnorm_residual_refuses_the_course_kernel():
    with pytest.raises(RuntimeError, match="course's own solution"):
        rms_ex.judge(kernels.fused_rmsnorm_residual, {"shape": (2, 8)}, 3)


def test_tally_counts_outer_launches_and_restores_triton():
    import importlib

    classes = [getattr(importlib.import_module(m), c) for m, c in launches._TARGETS
               if hasattr(importlib.import_module(m), c)]
    before = [cls.__dict__.get("run") for cls in classes]
    mine, course = collections.Counter(), collections.Counter()
    x = torch.randn(4, 16, device=DEV)
    with rms_ex._tallying(mine, course):
        kernels.softmax(x)
        kernels.softmax(x)
    assert course == {"_softmax_kernel": 2} and not mine
    assert [cls.__dict__.get("run") for cls in classes] == before


# -- torch.compile, as the notebook shows it -------------------------------------------------------------------


def test_recompilations_counted():
    shapes = [(8,), (16,), (32,), (4, 4)]
    assert measure.count_compiles(measure.sin_chain, shapes) == [1, 2, 2, 3]
    assert measure.count_compiles(measure.sin_chain, shapes, dynamic=False) == [1, 2, 3, 4]


def test_graph_break_found():
    e = measure.explain(measure.with_a_graph_break, torch.randn(10))
    assert e.graph_count == 2 and e.graph_break_count == 1


def test_eager_op_counts():
    x = torch.randn(4, 8)
    assert measure.eager_op_count(measure.sin_chain, x) == 4
    assert measure.eager_op_count(measure.ln_scale_gelu, x, torch.ones(8), torch.zeros(8)) == 3


def test_kernel_names_found_in_generated_code():
    code = ("cpp_fused_sin_0 = async_compile.cpp_pybinding(['const float*'], r'''\nint x;\n''')\n"
            "triton_poi_fused_add_1 = async_compile.triton('triton_poi', '''\n@triton.jit\ndef f(): pass\n''', "
            "device_str='cuda')\nbuf0 = extern_kernels.mm(a, b)\n")
    assert measure._KERNEL_DEF.findall(code) == [("cpp_fused_sin_0", "cpp_pybinding"),
                                                 ("triton_poi_fused_add_1", "triton")]
    assert measure._EXTERN.findall(code) == ["mm"]
    assert "int x;" in measure.kernel_source(code, "cpp_fused_sin_0")


def test_ncu_csv_parsed():
    text = ('==PROF== Connected\n"ID","Kernel Name","dram__bytes_read.sum","gpu__time_duration.sum"\n'
            '"","","byte","nsecond"\n"0","triton_poi_fused_sin_0","268,563,200","322368"\n')
    rows = measure._ncu_csv(text)
    assert rows[0]["name"] == "triton_poi_fused_sin_0" and rows[0]["dram__bytes_read.sum"] == 268563200.0
    assert rows[0]["gpu__time_duration.sum"] == 322368.0 and rows[0]["dram__bytes_write.sum"] is None


def test_recorded_ncu_result_is_there(capsys):
    doc = recorded.show_recorded_ncu()
    out = capsys.readouterr().out
    assert "recorded on an NVIDIA H100" in out and "_softmax_kernel" in out and "triton_poi_fused_sin_0" in out
    assert doc["ncu_softmax"]["ok"] and doc["ncu_sin_compiled"]["ok"]


# -- benchmark targets ---------------------------------------------------------------------------------------------


def test_rmsnorm_targets():
    p = {"ms": {"reference (Triton)": 1.0, "torch.compile max-autotune": 1.5, "torch eager": 4.0},
         "gbps": {"reference (Triton)": 2700.0}, "copy_gbps": 3000.0}
    t = bench.rmsnorm_targets({"points": {"8192x8192": p}})
    assert [(x["value"], x["met"]) for x in t] == [(1.5, True), (0.9, True)]
    p["gbps"]["reference (Triton)"] = 2400.0
    assert not bench.rmsnorm_targets({"points": {"8192x8192": p}})[1]["met"]


def test_fusion_target_from_ncu_bytes():
    res = {"points": {"sin chain, 2^26 fp32": {"ideal_bytes": 100}},
           "ncu_sin_chain_compiled": {"ok": True, "kernels": [{"dram__bytes_read.sum": 50,
                                                               "dram__bytes_write.sum": 60}]}}
    (t,) = bench.fusion_targets(res)
    assert t["value"] == 1.1 and t["met"]
    res["ncu_sin_chain_compiled"] = {"ok": False, "why": "ERR_NVGPUCTRPERM", "kernels": []}
    assert bench.fusion_targets(res) == []


def test_proton_tree_printed_with_scope_times_from_their_kernels(capsys):
    tree = {"scope a": {"time_ms": 0.0, "calls": 0, "children": {
                "k1": {"time_ms": 3.0, "calls": 10, "children": {}},
                "k2": {"time_ms": 1.0, "calls": 10, "children": {}}}},
            "scope b": {"time_ms": 0.0, "calls": 0, "children": {"k3": {"time_ms": 4.0, "calls": 5, "children": {}}}}}
    assert measure.inclusive_ms(tree["scope a"]) == 4.0
    measure.print_tree(tree)
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[-1] for ln in lines] == ["a", "k1", "k2", "b", "k3"]
    assert "50.0%" in lines[0] and "37.5%" in lines[1] and "10x" in lines[1] and "x" not in lines[0].split("%")[1]
