"""Timing maths, the above-peak flag, the CPU timer, compare() and sweep()."""
import statistics
import time

import matplotlib
import pytest

matplotlib.use("Agg")

import gpucourse  # noqa: E402
from gpucourse import timing  # noqa: E402
from gpucourse.timing import BenchResult  # noqa: E402


def test_unit_conversions():
    assert timing.gbps(3e9, 1000.0) == pytest.approx(3.0)  # 3 GB in 1 s
    assert timing.gbps(2 * 2**30, 1.0) == pytest.approx(2147.483648)
    assert timing.tflops(2 * 8192**3, 1.0) == pytest.approx(1099.511627776)


def test_result_statistics_and_percent_of_peak():
    r = BenchResult("x", samples=[1.0, 2.0, 3.0, 4.0, 100.0], mode="gpu", bytes=2e9, flops=1e12, peak_gbs=4000,
                    peak_tflops=1000)
    assert r.median_ms == 3.0
    assert r.q25_ms == 2.0 and r.q75_ms == 4.0 and r.iqr_ms == 2.0
    assert r.gbps == pytest.approx(2e9 / 3e-3 / 1e9)
    assert r.pct_of_peak_bw == pytest.approx(100 * r.gbps / 4000)
    assert r.tflops == pytest.approx(1e12 / 3e-3 / 1e12)
    assert r.cv == pytest.approx(statistics.stdev(r.samples) / statistics.mean(r.samples))
    assert set(r.to_dict()) >= {"median_ms", "gbps", "tflops", "pct_of_peak_bw", "warnings"}


def test_above_peak_bandwidth_is_flagged_as_a_measurement_error():
    ok = BenchResult("ok", samples=[1.0], mode="gpu", bytes=3.0e9, peak_gbs=3350)  # 3000 GB/s: under peak
    assert timing.peak_check(ok) == []
    bad = BenchResult("bad", samples=[0.5], mode="gpu", bytes=3.0e9, peak_gbs=3350)  # 6000 GB/s: impossible
    warnings = timing.peak_check(bad)
    assert len(warnings) == 1 and warnings[0].startswith("IMPOSSIBLE") and "synchroniz" in warnings[0]
    bad.warnings.extend(warnings)
    assert bad.suspicious and "measurement error?" in str(timing.Comparison([bad], "bad"))


def test_above_peak_flops_is_flagged_and_l2_cause_named():
    r = BenchResult("mm", samples=[1.0], mode="gpu", flops=2e15, dtype="bfloat16", peak_tflops=989.4)
    assert "above this GPU's peak" in timing.peak_check(r)[0]
    r2 = BenchResult("l2", samples=[1.0], mode="gpu", bytes=1e10, peak_gbs=3350, flush_l2=False)
    assert "flush_l2=False" in timing.peak_check(r2)[0]


def test_cpu_bench_measures_a_known_duration():
    if gpucourse.on_gpu():
        pytest.skip("host-timer path only")
    def plain_median_ms() -> float:  # the same sleep timed plainly, beside the bench: what the machine gives now
        samples = []
        for _ in range(15):
            t0 = time.perf_counter()
            time.sleep(0.002)
            samples.append((time.perf_counter() - t0) * 1e3)
        return sorted(samples)[len(samples) // 2]

    before = plain_median_ms()
    r = gpucourse.bench(time.sleep, 0.002, warmup_ms=5, rep_ms=60, name="sleep 2 ms")
    after = plain_median_ms()
    assert r.mode == "cpu" and r.name == "sleep 2 ms"
    assert len(r.samples) >= 10
    # sleep never returns early; the scheduler adds a little idle (under 4 ms), more on a loaded machine, where the
    # plain timing around the bench stretches alike
    assert 1.9 <= r.median_ms <= max(4.0, 2 * max(before, after)), (r.median_ms, before, after)
    assert r.gbps is None and r.pct_of_peak_bw is None


def test_bench_declared_bytes_give_gbps():
    import torch

    x = torch.randn(1 << 16, device=gpucourse.torch_device())
    r = gpucourse.bench(lambda: x * 2, bytes=2 * x.numel() * 4, rep_ms=20)
    assert r.gbps == pytest.approx(2 * x.numel() * 4 / (r.median_ms * 1e-3) / 1e9)
    assert "GB/s" in r.summary()


def test_compare_renders_text_and_html_with_speedups():
    fast = lambda: time.sleep(0.001)  # noqa: E731
    slow = lambda: time.sleep(0.003)  # noqa: E731
    c = gpucourse.compare({"slow": slow, "fast": fast}, warmup_ms=2, rep_ms=40, min_reps=5)
    assert c.baseline == "slow"
    assert c.speedup("fast") > 1.2  # 3 ms vs 1 ms of sleep; a loaded machine adds to both, so only the order is sure
    text, html = str(c), c._repr_html_()
    assert "speedup vs slow" in text and "fast" in text and "1.00×" in text
    assert html.startswith("<table>") and "<td>fast</td>" in html
    with pytest.raises(KeyError):
        gpucourse.compare({"a": fast}, baseline="b", rep_ms=1, min_reps=1)


def test_sweep_collects_every_size_and_plots():
    import torch

    sizes = [2**10, 2**12, 2**14]
    s = gpucourse.sweep({"mul": lambda x: x * 2, "add": lambda x: x + x}, sizes,
                        make_args=lambda n: torch.randn(n), bytes=lambda n: 8 * n, plot="gbps", rep_ms=5, min_reps=3,
                        progress=False)
    assert s.sizes == sizes and len(s.series("mul", "gbps")) == 3 and all(v > 0 for v in s.series("add", "ms"))
    ax = s.plot("ms")
    assert ax.get_xscale() == "log" and len(ax.get_lines()) == 2


@pytest.mark.gpu
def test_gpu_bench_agrees_with_do_bench_on_a_copy():
    import torch
    import triton.testing

    x = torch.empty(2**26, device="cuda").uniform_()
    y = torch.empty_like(x)
    ours = gpucourse.bench(lambda: y.copy_(x), bytes=2 * x.numel() * 4)
    theirs = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
    assert ours.median_ms == pytest.approx(theirs, rel=0.05)
    assert not ours.suspicious


@pytest.mark.gpu
def test_unsynchronized_host_timing_would_be_flagged():
    """Time a launch with a host clock and no synchronize, then feed that to the peak check: it must be flagged."""
    import torch

    x = torch.empty(2**28, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    y.copy_(x)  # returns as soon as the copy is queued
    ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    spec = gpucourse.specs.current()
    r = BenchResult("naive", samples=[ms], mode="gpu", bytes=2 * x.numel() * 4, peak_gbs=spec.bandwidth_gbs)
    assert r.gbps > spec.bandwidth_gbs and timing.peak_check(r)


def test_interleaved_takes_turns_and_reports_the_median_round():
    calls = []

    def named(name):
        def fn():
            if not calls or calls[-1] != name:
                calls.append(name)  # one entry per run of consecutive calls: the order of the turns
        return fn

    out = timing.interleaved({"a": named("a"), "b": named("b")}, rounds=3, warmup_ms=0.1, rep_ms=0.5, min_reps=3)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert set(out) == {"a", "b"}
    for name, rounds in out.items():
        assert len(rounds.results) == 3 and all(r.name == name for r in rounds.results)
        assert rounds.median_ms == statistics.median(r.median_ms for r in rounds.results)
        assert rounds.typical in rounds.results and rounds.typical.median_ms == rounds.median_ms  # odd count


def test_rounds_median_of_medians_and_its_round():
    results = [BenchResult(str(ms), samples=[ms, ms + 0.1], mode="cpu", bytes=1e6) for ms in (3.0, 1.0, 2.6, 9.0, 2.5)]
    rounds = timing.Rounds(results)
    assert rounds.medians_ms == pytest.approx([3.05, 1.05, 2.65, 9.05, 2.55])
    assert rounds.median_ms == pytest.approx(2.65)
    assert rounds.typical is results[2] and rounds.typical.gbps == pytest.approx(1e6 / 2.65e-3 / 1e9)


def test_gpu_path_tops_up_do_bench_to_the_minimum_repeats(monkeypatch):
    """bench's GPU path hands the timing to triton's do_bench; a slow kernel gets few repeats in do_bench's window,
    so bench asks it again for the missing ones (the window sized from the median), and caps at max_reps."""
    calls = []

    def fake_do_bench(fn, warmup, rep, return_mode):
        calls.append((warmup, rep, return_mode))
        return [40.0, 41.0, 42.0] if len(calls) == 1 else [40.0] * 12

    monkeypatch.setattr(timing, "_do_bench", lambda: fake_do_bench)
    samples = timing._gpu_samples(lambda: None, warmup_ms=25, rep_ms=100, flush_l2=True, min_reps=10, max_reps=14)
    assert calls[0] == (25, 100, "all") and calls[1][0] == 0
    assert calls[1][1] == pytest.approx(7 * 41.0 * 1.1)  # the 7 missing repeats at the median's pace
    assert len(samples) == 14 and samples[:3] == [40.0, 41.0, 42.0]


def test_comparison_says_when_the_spread_can_flip_the_ranking():
    fast = BenchResult("fast", samples=[1.0, 1.0, 1.1, 9.0, 9.0], mode="cpu")  # IQR 8x the median
    slow = BenchResult("slow", samples=[2.0, 2.0, 2.0, 2.1, 2.1], mode="cpu")
    far = BenchResult("far", samples=[50.0, 50.0, 50.0, 50.1, 50.1], mode="cpu")
    c = timing.Comparison(results=[fast, slow, far], baseline="slow")
    notes = c.noise_notes()
    assert any(n.startswith("noisy: fast's spread") and "7.3x its median" in n for n in notes)
    assert "fast and slow are within each other's spread: a tie, not a ranking" in notes
    assert not any("far" in n for n in notes)  # far apart and steady: nothing to say
    assert "note: noisy: fast" in str(c) and "note: fast and slow" in c._repr_html_()
    quiet = timing.Comparison(results=[slow, far], baseline="slow")
    assert quiet.noise_notes() == [] and "note:" not in str(quiet)
