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
    assert doc["ncu_softmax"][0]["name"] == "_softmax_kernel"
    assert doc["ncu_sin_compiled"][0]["name"] == "triton_poi_fused_sin_0"
    assert "(h100-l09_compile_profiling.json)" in out  # the curated file, never a lab file
    with pytest.raises(KeyError, match="declares no key"):
        doc["ncu_sin_eager"]


# -- benchmark targets ---------------------------------------------------------------------------------------------


def test_rmsnorm_targets_are_copy_bandwidth_and_the_compiler_without_graphs():
    p = {"ms": {"reference (Triton)": 1.0, "torch.compile max-autotune": 2.4,
                "torch.compile max-autotune-no-cudagraphs": 0.95, "torch eager": 4.0},
         "gbps": {"reference (Triton)": 2700.0}, "copy_gbps": 3000.0}
    t = bench.rmsnorm_targets({"points": {"8192x8192": p}})
    assert [(x["value"], x["met"]) for x in t] == [(0.9, True), (0.95, True)]
    assert "copy bandwidth" in t[0]["name"] and "no-cudagraphs" in t[1]["name"]
    assert not any("max-autotune (speed)" in x["name"] for x in t)  # the graph's input copies set no target
    p["gbps"]["reference (Triton)"] = 2400.0
    p["ms"]["torch.compile max-autotune-no-cudagraphs"] = 0.85  # the compiler 15% faster: a loss
    assert [x["met"] for x in bench.rmsnorm_targets({"points": {"8192x8192": p}})] == [False, False]


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


# -- reading what the profiler and inductor say (the GPU cells print these; checked here on made-up data) ---------


def test_waiting_ops_are_the_items_with_a_sync_inside():
    events = [_ev("cpu_op", "aten::item", 0, 50), _ev("cuda_runtime", "cudaStreamSynchronize", 10, 30),
              _ev("cpu_op", "aten::item", 100, 5),  # a host tensor's .item(): no sync inside
              _ev("cpu_op", "aten::item", 200, 50),
              dict(_ev("cuda_runtime", "cudaStreamSynchronize", 210, 20), tid=99),  # another thread's wait
              _ev("cpu_op", "aten::mul", 300, 50), _ev("cuda_runtime", "cudaDeviceSynchronize", 310, 20)]
    assert [e["ts"] for e in readtrace.waiting_ops(events)] == [0]
    assert [e["ts"] for e in readtrace.waiting_ops(events, names=("aten::mul",))] == [300]


def test_api_table_sums_runtime_and_driver_calls():
    events = [_ev("cuda_runtime", "cudaLaunchKernel", 0, 5), _ev("cuda_runtime", "cudaLaunchKernel", 9, 4),
              _ev("cuda_driver", "cuLaunchKernel", 20, 3), _ev("cuda_runtime", "cudaStreamSynchronize", 30, 40),
              _ev("kernel", "k", 0, 100)]
    assert readtrace.api_table(events) == [("cudaStreamSynchronize", 40.0, 1), ("cudaLaunchKernel", 9.0, 2),
                                           ("cuLaunchKernel", 3.0, 1)]


def test_per_call_divides_the_gpu_work_by_the_calls():
    events = [_ev("kernel", "mm", 0, 10), _ev("kernel", "gelu", 10, 2), _ev("kernel", "mm", 20, 12),
              _ev("kernel", "gelu", 32, 2), _ev("gpu_memcpy", "Memcpy HtoD", 40, 4),
              _ev("gpu_user_annotation", "## Call CompiledFxGraph ##", 0, 50), _ev("cpu_op", "aten::mm", 0, 99)]
    got = readtrace.per_call(events, calls=2)
    assert got["us"] == 15.0 and got["ops"] == 2.5
    assert list(got["by_name"]) == ["mm", "gelu", "Memcpy HtoD"] and got["by_name"]["mm"] == {"us": 11.0, "n": 1.0}
    with pytest.raises(ValueError, match="at least 1"):
        readtrace.per_call(events, calls=0)


AUTOTUNE_LOG = """Autotune Choices Stats:
{"num_choices": 21, "num_triton_choices": 20, "best_kernel": "mm", "best_time": 1.4086400270462036}
AUTOTUNE mm(8192x8192, 8192x8192)
strides: [8192, 1], [8192, 1]
dtypes: torch.bfloat16, torch.bfloat16
  mm 1.4086 ms 100.0% 
  triton_mm_126 1.6460 ms 85.6% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, BLOCK_M=128, num_warps=8
  triton_mm_125 1.8122 ms 77.7% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, BLOCK_M=128, num_warps=4
SingleProcess AUTOTUNE benchmarking takes 8.8623 seconds and 1.0167 seconds precompiling for 21 choices
Autotune Choices Stats:
{"num_choices": 20, "num_triton_choices": 18, "best_kernel": "triton_mm_6"}
AUTOTUNE addmm(8x512, 8x512, 512x512)
strides: [0, 1], [512, 1], [1, 512]
dtypes: torch.bfloat16, torch.bfloat16, torch.bfloat16
  triton_mm_6 0.0380 ms 100.0% ACC_TYPE='tl.float32', BLOCK_M=16, num_warps=4
  triton_mm_12 0.0392 ms 97.0% ACC_TYPE='tl.float32', BLOCK_M=16, num_warps=4
SingleProcess AUTOTUNE benchmarking takes 6.3175 seconds and 0.0004 seconds precompiling for 20 choices
"""


def test_autotune_tables_read_as_data():
    mm, addmm = measure.parse_autotune("noise before\n" + AUTOTUNE_LOG)
    assert (mm["op"], mm["sizes"], mm["n_choices"], mm["seconds"]) == ("mm", "8192x8192, 8192x8192", 21, 8.8623)
    assert mm["best"]["name"] == "mm" and mm["best_triton"] == {
        "name": "triton_mm_126", "ms": 1.646, "pct": 85.6,
        "desc": "ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, BLOCK_M=128, num_warps=8"}
    assert addmm["best"]["name"] == addmm["best_triton"]["name"] == "triton_mm_6" and len(addmm["choices"]) == 2
    lines = measure.autotune_lines([mm, addmm])
    assert "21 choices timed in 8.9 s" in lines[0] and "(86% of its speed)" in lines[0]  # 1.4086 / 1.6460
    assert "library" not in lines[1] and "fastest triton_mm_6 0.0380 ms" in lines[1]
    assert measure.parse_autotune("no table here") == []


def test_quiet_inductor_keeps_what_inductor_prints_and_puts_everything_back():
    import logging
    import sys
    import warnings

    parent, child = logging.getLogger("torch._inductor"), logging.getLogger("torch._inductor.select_algorithm")
    before = (list(parent.handlers), parent.propagate, list(child.handlers), child.propagate, sys.stderr)
    with measure.quiet_inductor() as log:
        sys.stderr.write(AUTOTUNE_LOG)
        child.error("Runtime error during autotuning: out of resource: triton_mm Required: 262144")
        child.error("Ignoring this choice.")
        warnings.warn("TypedStorage is deprecated", UserWarning)
    assert (list(parent.handlers), parent.propagate, list(child.handlers), child.propagate, sys.stderr) == before
    assert len(measure.parse_autotune(log["stderr"])) == 2
    assert log["warnings"] == ["UserWarning: TypedStorage is deprecated"] and len(log["log"]) == 2
    assert measure.inductor_log_lines(log) == [
        "inductor's log: 2 error records (1 about a configuration that needs more shared memory than an SM has: "
        "skipped)"]
    assert measure.inductor_log_lines({"log": [], "warnings": ["x"], "stderr": ""}) == []


def _modes_result():
    row = lambda ev, wall, gpu, ops, comp, mib=0.0: {  # noqa: E731
        "event_us": ev, "wall_us": wall, "wall_speedup": 264.0 / wall, "gpu_us": gpu, "gpu_ops": ops,
        "compile_s": comp, "memory_mib": {"allocated": mib / 2, "reserved": mib}, "autotune": [],
        "inductor_log": []}
    return {"eager": row(304.0, 264.0, 26.4, 12, 0.0), "default": row(524.0, 425.0, 25.1, 7, 2.0),
            "reduce-overhead": row(207.0, 157.0, 26.5, 8, 0.8, 2.0),
            "setup": {"calls": 300, "profile_calls": 50, "rounds": 3}}


def test_modes_lines_show_host_wall_and_gpu_time_and_pay_back_on_wall_clock():
    lines = measure.modes_lines(_modes_result())
    table = {ln.split()[0]: ln for ln in lines[1:4]}
    assert "pays back" not in table["default"]  # slower than eager: it never pays back
    # 0.8 s over (264 - 157) µs saved a call
    assert f"pays back after {0.8 / 107e-6:,.0f} calls on this host" in table["reduce-overhead"]
    assert " 17% " in table["reduce-overhead"] and " 10% " in table["eager"]  # GPU busy = GPU / wall
    assert "0.62x" in table["default"] and "1.68x" in table["reduce-overhead"]
    assert any("22.0 µs of wall clock per GPU operation" in ln and "2.2 µs on the GPU" in ln for ln in lines)
    assert any("reduce-overhead +2.0 MiB reserved (+1.0 allocated)" in ln for ln in lines)


def test_break_even_only_when_the_mode_saves_time():
    assert measure.break_even_calls(2.0, 300.0, 100.0) == pytest.approx(10_000)
    assert measure.break_even_calls(2.0, 300.0, 300.0) is None and measure.break_even_calls(2.0, 300.0, 400.0) is None


def test_copies_told_from_kernels_and_names_shortened():
    copy = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "TensorListMetadata<2>, at::native::Copy<c10::BFloat16, c10::BFloat16> >(at::native::TensorListMetadata<2>)")
    assert measure._is_copy(copy) and measure._is_copy("Memcpy DtoD (Device -> Device)")
    assert not measure._is_copy("triton_poi_fused__to_copy_add_0") and not measure._is_copy("nvjet_sm90_tst_256x128")
    assert not measure._is_copy("Memset (Device)") and measure.short_kernel("Memset (Device)") == "Memset"
    assert measure.short_kernel(copy) == "multi_tensor_apply_kernel"
    assert measure.short_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernel>(int)") \
        == "vectorized_elementwise_kernel"
    assert measure.short_kernel("triton_poi_fused_add_gelu_0") == "triton_poi_fused_add_gelu_0"
    assert measure.short_kernel("x" * 60, width=10) == "x" * 9 + "…"
    split = measure.gpu_split({"us": 20.0, "ops": 3.0, "by_name": {"nvjet_mm": {"us": 12.0, "n": 1.0},
                                                                    copy: {"us": 6.0, "n": 2.0},
                                                                    "triton_poi_fused_add_gelu_0": {"us": 2.0,
                                                                                                    "n": 1.0}}})
    assert split == {"us": 20.0, "copy_us": 6.0, "copy_ops": 2.0,
                     "kernels": {"nvjet_mm": 12.0, "triton_poi_fused_add_gelu_0": 2.0}}


def test_epilogue_lines_put_each_against_the_matmul_with_its_spread_and_its_kernels():
    res = {"ms": {"matmul alone (cuBLAS)": 1.6, "torch.compile max-autotune": 2.0},
           "rounds_ms": {"matmul alone (cuBLAS)": [1.58, 1.6, 1.65], "torch.compile max-autotune": [1.9, 2.0, 2.1]},
           "gpu": {"matmul alone (cuBLAS)": {"us": 1550.0, "copy_us": 0.0, "copy_ops": 0.0,
                                             "kernels": {"nvjet_sm90_tst": 1550.0}},
                   "torch.compile max-autotune": {"us": 2010.0, "copy_us": 410.0, "copy_ops": 2.0,
                                                  "kernels": {"mm_kernel": 1550.0, "triton_poi_fused_add_gelu_0": 50.0}}},
           "compiled": {"max-autotune": {"extern": ["mm"], "kernels": ["triton_poi_fused_add_gelu_0"],
                                         "compile_s": 14.0, "memory_mib": {"allocated": 384.0, "reserved": 512.0},
                                         "autotune": measure.parse_autotune(AUTOTUNE_LOG)[:1], "inductor_log": []}}}
    lines = measure.epilogue_lines(res)
    assert "1.25x" in lines[2] and "1.900-2.100" in lines[2] and "1.00x" in lines[1]
    assert "2.010 ms = 1.550 mm_kernel + 0.050 triton_poi_fused_add_gelu_0 + 0.410 in 2 copies" in lines[5]
    assert "holds +512 MiB reserved once compiled" in lines[6] and "86% of its speed" in lines[7]
    res.update(shape=[8192, 8192, 8192], out_mib=128.0, dtype="bfloat16")
    assert measure.epilogue_lines(res)[0] == ("gelu(a @ b + bias), M=8192 N=8192 K=8192 bf16: the output is 128 MiB, "
                                              "which each extra pass reads and writes")


def test_rmsnorm_lines_lead_with_the_copy():
    p = {"ms": {"reference (Triton)": 0.178, "torch.compile max-autotune-no-cudagraphs": 0.181,
                "torch.compile max-autotune": 0.424, "torch eager": 1.2},
         "gbps": {"reference (Triton)": 3024.0, "torch.compile max-autotune-no-cudagraphs": 2974.0,
                  "torch.compile max-autotune": 1266.0, "torch eager": 446.0},
         "copy_ms": 0.176, "copy_gbps": 3048.0, "bytes": 4 * 8192 * 8192 * 2 + 2 * 8192, "dtype": "bfloat16",
         "copy_fraction": {"reference (Triton)": 0.99, "torch.compile max-autotune-no-cudagraphs": 0.976,
                           "torch.compile max-autotune": 0.415, "torch eager": 0.146},
         "compiled_kernels": ["triton_red_fused_0"],
         "kernel_launches_per_call": {"torch.compile max-autotune": {"void at::native::multi_tensor_apply_kernel<"
                                                                    "at::native::Copy<c10::BFloat16> >(int)": 7,
                                                                    "triton_red_fused_0": 1}}}
    lines = measure.rmsnorm_lines("8192x8192", p)
    assert lines[0].startswith("8192x8192 bf16, 512 MiB moved") and "copy (same bytes)" in lines[1]
    assert lines[2].split()[:2] == ["reference", "(Triton)"] and lines[2].rstrip().endswith("0.99")
    assert "'multi_tensor_apply_kernel (a copy)': 7" in lines[6]
    assert "no-cudagraphs 1.02x" in lines[7] and "max-autotune 2.38x" in lines[7]
    assert lines[7].startswith("  generated: ['triton_red_fused_0']; ")
    p["compiled_kernels_no_cudagraphs"] = ["triton_per_fused_0"]
    assert "generated: ['triton_per_fused_0'] (with CUDA graphs: ['triton_red_fused_0'])" in \
        measure.rmsnorm_lines("8192x8192", p)[7]


def test_ncu_units_and_the_sm_clock():
    text = ('"ID","Kernel Name","gpu__time_duration.sum","smsp__cycles_elapsed.avg.per_second"\n'
            '"","","nsecond","cycle/nsecond"\n"0","triton_poi_fused_sin_0","322368","1.59"\n')
    (row,) = measure._ncu_csv(text)
    assert row["units"] == {"gpu__time_duration.sum": "nsecond", measure.SM_CLOCK: "cycle/nsecond"}
    assert measure.sm_clock_mhz(row) == pytest.approx(1590.0)
    assert measure.sm_clock_mhz(dict(row, units={measure.SM_CLOCK: "cycle/second"}, **{measure.SM_CLOCK: 1.98e9})) \
        == pytest.approx(1980.0)
    assert measure.sm_clock_mhz({"name": "k"}) is None


def test_ncu_clock_lines_compare_the_time_with_the_clocks():
    k = {"dram__throughput.avg.pct_of_peak_sustained_elapsed": 48.0,
         "sm__throughput.avg.pct_of_peak_sustained_elapsed": 81.4, "gpu__time_duration.sum": 322368.0,
         measure.SM_CLOCK: 1.59, measure.DRAM_CLOCK: 2.619,
         "units": {measure.SM_CLOCK: "cycle/nsecond", measure.DRAM_CLOCK: "cycle/nsecond"}}
    counters, timing_line = measure.ncu_clock_lines(k, 0.2577, {"sm": 1980.0, "memory": 2619.0})
    assert counters == "  counters (% of peak): DRAM throughput 48%; SM throughput 81%"
    assert "0.322 ms under ncu against 0.258 ms timed: 1.25x" in timing_line
    assert "clocks under ncu: SM 1,590 MHz, memory 2,619 MHz" in timing_line and "(1.25x ncu's)" in timing_line
    assert measure.ncu_clock_lines({}, 0.25, None) == []


def test_recorded_clock_scaling_of_the_sin_chain(capsys):
    c = recorded.show_clock_scaling()
    assert c["ncu_ms"] == pytest.approx(0.322368) and 1.2 < c["ratio"] < 1.3
    assert "0.322 ms under Nsight Compute" in capsys.readouterr().out


def test_fullgraph_names_the_break():
    err = measure.fullgraph_error(measure.with_a_graph_break, torch.randn(10))
    assert err is not None and ":" in err.splitlines()[0] and len(err) > 20
    assert measure.fullgraph_error(measure.sin_chain, torch.randn(10)) is None


def test_dynamo_errors_told_in_brief():
    class Unsupported(Exception):
        pass
    msg = ("Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace `print`\n  Hint: avoid\n\n"
           "from user code:\n   File \"m.py\", line 3, in f\n    print(x.item())\n\nSet TORCHDYNAMO_VERBOSE=1")
    assert measure._first_lines(Unsupported(msg)) == ("Unsupported: Failed to trace builtin operator (Dynamo does not "
                                                      "know how to trace `print`)\n    at: print(x.item())")
    assert measure._first_lines(ValueError("one line")) == "ValueError: one line"


def test_profiler_schedule_records_only_the_active_steps(tmp_path):
    model, opt = measure.small_model(width=16)
    data = measure.batches(2, width=16, rows=8)
    got = measure.profile_with_schedule(model, opt, data, str(tmp_path), wait=1, warmup=1, active=2)
    assert got["steps"] == 5 and len(got["files"]) == 1
    assert got["steps_in_file"][got["files"][0]] == ["ProfilerStep#2", "ProfilerStep#3"]
    with pytest.raises(ValueError):
        measure.profile_with_schedule(model, opt, data, str(tmp_path), active=0)


def test_cpu_vector_isa_is_a_width_of_floats():
    isa = measure.cpu_vector_isa()
    assert (isa["isa"] is None and isa["floats"] == 1) or (isa["floats"] in (4, 8, 16) and isa["isa"])


def test_the_kernel_as_an_operator_computes_what_the_kernel_does():
    op = kernels.rmsnorm_residual_op()
    assert op is kernels.rmsnorm_residual_op()  # registered once
    x, r = torch.randn(3, 2, 40, device=DEV), torch.randn(3, 2, 40, device=DEV)
    w = torch.randn(40, device=DEV)
    got, want = op(x, r, w, 1e-6), kernels.fused_rmsnorm_residual(x, r, w, 1e-6)
    assert all(torch.equal(a, b) and a.shape == x.shape for a, b in zip(got, want))


def test_generated_keeps_earlier_compilations_unless_asked(monkeypatch):
    calls = []
    real = torch._dynamo.reset
    monkeypatch.setattr(torch._dynamo, "reset", lambda: (calls.append(1), real()))
    x = torch.randn(16)
    g = measure.generated(measure.sin_chain, x, reset=False, backend="eager")
    assert calls == [] and torch.allclose(g["out"], measure.sin_chain(x))
    measure.generated(measure.sin_chain, x, backend="eager")
    assert calls == [1]


def test_ncu_runs_the_lesson_s_target_as_a_module(monkeypatch):
    """ncu profiles ``python -m gpucourse.lessons.l09_compile_profiling.ncu_target``: no script from the checkout."""
    from gpucourse import ncu as ncu_kit
    from gpucourse.lessons.l09_compile_profiling import ncu_target

    monkeypatch.setattr(ncu_kit, "find", lambda: "/bin/echo")  # echo prints the command it was given
    res = measure.ncu("softmax")
    assert not res["ok"] and "-m gpucourse.lessons.l09_compile_profiling.ncu_target softmax" in res["why"]
    assert ncu_target.main(["no_such_target"]) == 2 and set(ncu_target.TARGETS) >= {"softmax", "sin_chain_compiled"}


def test_recorded_values_are_the_promoted_lab_run():
    """The curated file holds what its promote step takes from the lab's run, under declared keys only."""
    import json
    import os

    from gpucourse.workbooks import ROOT

    doc = recorded.load()
    assert set(doc) == set(recorded.KEYS) and doc.sources[0]["file"] == recorded.SOURCE
    path = os.path.join(ROOT, recorded.SOURCE)
    if os.path.exists(path):
        with open(path) as f:
            assert recorded.promote_values(json.load(f)) == dict(doc)
    with pytest.raises(KeyError, match="declares no key"):
        doc["fusion"]
