#!/usr/bin/env python3
"""Lesson 09 smoke test on a GPU: every new or changed GPU measurement of the lesson at small sizes, printed, in well
under 90 s on an H100. Exits 1 if any step raised (its traceback is printed), 0 otherwise; on a machine without CUDA
it prints "no GPU" and exits 0.

    PYTHONPATH=. python3 gpu_smoke/l09.py
"""
import os
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

if not torch.cuda.is_available():
    print("no GPU")
    sys.exit(0)

import gpucourse  # noqa: E402

gpucourse.setup()

import triton  # noqa: E402

from gpucourse.lessons.l09_compile_profiling import bench, kernels, measure, readtrace, recorded  # noqa: E402

print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
LOW = measure.low_dtype().torch
FAILED = []


def step(name):
    def run(fn):
        t0 = time.time()
        print(f"\n== {name}", flush=True)
        try:
            fn()
            print(f"   ok ({time.time() - t0:.1f} s)", flush=True)
        except Exception:  # noqa: BLE001 - report every step, fail at the end
            traceback.print_exc()
            FAILED.append(name)
            print(f"   FAILED ({time.time() - t0:.1f} s)", flush=True)
        return fn
    return run


@step("the fused kernel as an operator (torch.library.triton_op): eager, and compiled with fullgraph=True")
def _op():
    x, r = (torch.randn(256, 1000, device="cuda", dtype=LOW) for _ in range(2))
    w = torch.randn(1000, device="cuda", dtype=LOW)
    got, want = kernels.rmsnorm_residual_op()(x, r, w, 1e-6), kernels.fused_rmsnorm_residual(x, r, w, 1e-6)
    assert all(torch.equal(a, b) for a, b in zip(got, want)), "the operator differs from the kernel"
    own = measure.own_kernel_in_compile(x, r, w)
    print("  ", own)
    assert own["own_kernel_in_code"], "the course's kernel is not in inductor's code"
    assert own["max_abs_diff"] < 0.1, own["max_abs_diff"]


@step("fullgraph=True names the graph break")
def _fullgraph():
    xs = torch.randn(1000)
    print("  ", measure.fullgraph_error(measure.with_a_graph_break, xs))
    assert measure.fullgraph_error(measure.sin_chain, xs) is None


@step("profiler: schedule window, the flat API table, the .item() calls that wait")
def _profiler():
    model, opt = measure.small_model(width=256)
    data = measure.batches(3, width=256, rows=512)
    d = tempfile.mkdtemp(prefix="smoke09-")
    win = measure.profile_with_schedule(model, opt, data, d, wait=1, warmup=1, active=2)
    print("  ", win["steps"], "steps;", list(win["steps_in_file"].values()))
    assert list(win["steps_in_file"].values()) == [["ProfilerStep#2", "ProfilerStep#3"]]
    path = os.path.join(d, "steps.json")
    measure.profile_steps(model, opt, data, trace_path=path)
    events = readtrace.load(path)
    items = [e for e in events if e.get("name") == "aten::item"]
    waiting = readtrace.waiting_ops(events)
    print(f"   {len(items)} aten::item, {len(waiting)} with a sync inside; top API calls:",
          [(n, round(us), c) for n, us, c in readtrace.api_table(events)[:4]])
    assert len(waiting) == len(data), "expected one waiting .item() per step (loss.item())"


@step("gpu_time_per_call on a plain kernel")
def _gpu_time():
    x = torch.randn(1 << 22, device="cuda")
    per = measure.gpu_time_per_call(lambda: torch.sin(x), calls=10)
    print("  ", {k: per[k] for k in ("us", "ops")}, list(per["by_name"])[:2])
    assert per["ops"] == 1 and per["us"] > 0


@step("compile modes: host (events), wall clock, GPU time, memory (small run)")
def _modes():
    res = measure.compile_modes(rounds=1, calls=30, profile_calls=5)
    print("\n".join("   " + ln for ln in measure.modes_lines(res)))
    for m in ("eager", *measure.MODES):
        assert res[m]["gpu_us"] > 0 and res[m]["wall_us"] > 0 and res[m]["gpu_ops"] >= 1, m


@step("epilogue timings at 1024^3 (few rounds)")
def _epilogue():
    res = measure.epilogue_timings(rounds=1, rep_ms=10, m=1024, n=1024, k=1024, profile_calls=2)
    print("\n".join("   " + ln for ln in measure.epilogue_lines(res)))
    assert set(res["ms"]) >= {"matmul alone (cuBLAS)", "torch.compile max-autotune-no-cudagraphs"}


@step("RMSNorm point at 1024x2048 against the copy (one round), and its targets")
def _rms():
    p = measure.rmsnorm_point(1024, 2048, rounds=1)
    print("\n".join("   " + ln for ln in measure.rmsnorm_lines("1024x2048", p)))
    for t in bench.rmsnorm_targets({"points": {"1024x2048": p}}):
        print(f"   target {t['name']}: {t['value']:.3f} ({'met' if t['met'] else 'MISSED'})")


@step("Nsight Compute with the added counters (softmax), and the clock lines")
def _ncu():
    live = measure.ncu("softmax")
    print("  ", {k: v for k, v in live.items() if k != "kernels"})
    if not live["ok"]:
        print("   (ncu could not run here: the lesson then shows the recorded figures; not a failure of this step)")
        return
    recorded.show_ncu(live["kernels"])
    k = live["kernels"][0]
    print("   units:", k.get("units"))
    clocks = measure.max_clocks_mhz()
    print("   nvidia-smi max clocks:", clocks)
    print("\n".join(measure.ncu_clock_lines(k, 0.087, clocks)))
    assert measure.sm_clock_mhz(k) is not None, "no SM clock read from ncu's row"
    assert k.get("sm__throughput.avg.pct_of_peak_sustained_elapsed") is not None


recorded.show_clock_scaling()
print(f"\n{len(FAILED)} step(s) failed: {FAILED}" if FAILED else "\nall steps passed")
sys.exit(1 if FAILED else 0)
