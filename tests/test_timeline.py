"""Timeline maths on synthetic intervals, and extraction from real profiler events (CPU lane in CPU mode)."""
from __future__ import annotations

import types

import matplotlib
import pytest

matplotlib.use("Agg")

import gpucourse  # noqa: E402
from gpucourse import timeline  # noqa: E402


def test_merge_and_busy_time():
    iv = [(5, 7, "b"), (0, 2, "a"), (1, 3, "c"), (10, 10, "empty")]
    assert timeline.merge(iv) == [(0, 3), (5, 7), (10, 10)]
    assert timeline.busy_time(iv) == 5
    assert timeline.busy_time(iv, 2, 6) == 2  # (2,3) and (5,6)
    with pytest.raises(ValueError):
        timeline.merge([(3, 1)])


def test_idle_fraction():
    assert timeline.idle_fraction([], 0, 10) == 1.0
    assert timeline.idle_fraction([(0, 10)], 0, 10) == 0.0
    assert timeline.idle_fraction([(0, 4), (2, 6), (8, 9)], 0, 10) == pytest.approx(0.3)
    assert timeline.idle_fraction([(-5, 5)], 0, 10) == pytest.approx(0.5)  # clipped to the window
    with pytest.raises(ValueError):
        timeline.idle_fraction([], 1, 1)


def _ev(name, s, e, dev="DeviceType.CPU", parent=None):
    return types.SimpleNamespace(name=name, time_range=types.SimpleNamespace(start=s, end=e), device_type=dev,
                                 cpu_parent=parent)


def test_from_events_splits_lanes_and_keeps_top_level_host_events():
    top = _ev("aten::mm", 100, 110)
    events = [top, _ev("aten::addmm", 101, 109, parent=top), _ev("cudaLaunchKernel", 102, 104, parent=top),
              _ev("gemm_kernel", 105, 125, dev="DeviceType.CUDA"), _ev("cudaStreamSynchronize", 111, 126),
              _ev("Memcpy DtoH", 126, 128, dev="DeviceType.CUDA")]
    tl = timeline.from_events(events, has_gpu=True)
    assert [n for _, _, n in tl.cpu] == ["aten::mm", "cudaLaunchKernel", "cudaStreamSynchronize"]
    assert [n for _, _, n in tl.gpu] == ["gemm_kernel", "Memcpy DtoH"]
    assert tl.window == (0, 28)  # shifted to start at 0
    assert tl.idle_fraction() == pytest.approx(1 - 22 / 28)
    assert tl.gpu_busy_us() == pytest.approx(22)
    assert timeline._color("cudaStreamSynchronize", "cpu") == "tab:red"
    assert timeline._color("Memcpy DtoH", "gpu") == "tab:orange"


def test_only_calls_that_can_block_the_host_are_coloured_as_waits():
    for name in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                 "cudaMemcpyAsync"):  # a copy to or from pageable memory waits, whatever its name says
        assert timeline._color(name, "cpu") == "tab:red", name
    for name in ("cudaStreamWaitEvent", "cudaLaunchKernel", "aten::copy_", "cudaMalloc"):
        assert timeline._color(name, "cpu") == "tab:gray", name


def test_profile_real_code_and_draw():
    import torch

    x = torch.randn(256, 256, device=gpucourse.torch_device())
    tl = timeline.profile(lambda: (x @ x).relu().sum())
    assert [n for _, _, n in tl.cpu if not n.startswith("cuda")] == ["aten::matmul", "aten::relu", "aten::sum"], tl.cpu
    if gpucourse.on_gpu():
        assert tl.gpu and 0 <= tl.idle_fraction() < 1
    else:
        assert tl.gpu == [] and tl.idle_fraction() is None
    ax = timeline.draw(tl, title="test")
    texts = [t.get_text() for t in ax.texts]
    assert ("no GPU lane in CPU mode" in texts) == (not gpucourse.on_gpu())


def test_profiling_prints_no_profiler_notes(recwarn):
    """torch.profiler warns that it 'clears events at the end of each cycle' (lesson 02 showed it on stderr): the
    course profiles one cycle and reads it, so the note is kept quiet; other warnings still come through."""
    import warnings

    from gpucourse import timeline

    with timeline.quiet_profiler():
        warnings.warn("Warning: Profiler clears events at the end of each cycle.Only events from the current cycle "
                      "will be reported.", UserWarning)
        warnings.warn("something else", UserWarning)
    assert [str(w.message) for w in recwarn] == ["something else"]
    tl = timeline.profile(lambda: sum(range(1000)))
    assert tl is not None and not [w for w in recwarn if "Profiler clears events" in str(w.message)]
