"""gpucourse.roofline: the intensity formulas against hand computations, the bound classification and predictions.
(Lesson 03's helpers built on it are tested in tests/lessons/test_l03_memory_hierarchy.py.)"""
from __future__ import annotations

import dataclasses

import pytest

import gpucourse
from gpucourse import roofline as R


def test_relu_fp32_intensity_is_one_eighth():
    op = R.elementwise(1000, "float32")  # 1 comparison per element; 4 bytes read + 4 written
    assert op.flops == 1000 and op.bytes == 8000
    assert op.intensity == 1 / 8
    assert R.elementwise(1000, "int8").intensity == 1 / 2  # Saroufim's int8 variant


def test_gemm_intensities_from_molchanov():
    skinny = R.gemm(8192, 128, 8192, "bf16")
    square = R.gemm(8192, 8192, 8192, torch_dtype("bfloat16"))
    # by hand: M N K / (M K + K N + M N) with 2-byte elements
    assert skinny.intensity == pytest.approx(8192 * 128 * 8192 / (8192 * 8192 + 8192 * 128 + 8192 * 128))
    assert round(skinny.intensity, 1) == 124.1 and round(square.intensity) == 2731
    assert square.flops == 2 * 8192**3 and square.bytes == 3 * 8192 * 8192 * 2


def torch_dtype(name):
    import torch

    return getattr(torch, name)


def test_reduction_and_gemv_by_hand():
    r = R.reduction(4, 10, "float32")
    assert (r.flops, r.bytes) == (40, (40 + 4) * 4)
    g = R.gemv(3, 5, "float16")
    assert (g.flops, g.bytes) == (30, (15 + 5 + 3) * 2)
    assert R.gemv(16384, 16384, "bf16").intensity == pytest.approx(1.0, rel=1e-3)


def test_from_dict_matches_the_makers_and_rejects_bad_input():
    assert R.from_dict({"kind": "gemm", "M": 2, "N": 3, "K": 4, "dtype": "float32"}) == R.gemm(2, 3, 4, "float32")
    assert R.from_dict({"kind": "elementwise", "n": 10, "inputs": 2, "flops_per_element": 3, "dtype": "float16"}) \
        == R.elementwise(10, "float16", inputs=2, flops_per_element=3)
    with pytest.raises(ValueError, match="missing"):
        R.from_dict({"kind": "gemm", "M": 2, "N": 3})
    with pytest.raises(ValueError, match="kind"):
        R.from_dict({"kind": "conv"})
    with pytest.raises(ValueError, match="dtype"):
        R.elementwise(10, "float13")


def test_ops_per_byte_and_classification():
    c = R.Ceilings(gbps=1000.0, tflops=100.0, source="test")  # 1e14 / 1e12 = 100 flop/B
    assert R.ops_per_byte(c) == pytest.approx(100.0)
    assert R.classify(R.gemm(8192, 128, 8192, "bf16"), c) == "compute"  # 124 > 100
    h100 = R.spec_ceilings("H100-SXM")
    assert R.ops_per_byte(h100) == pytest.approx(989.4e12 / 3350e9)
    assert R.classify(R.gemm(8192, 128, 8192, "bf16"), h100) == "memory"  # 124 < 295
    assert R.classify(R.gemm(8192, 8192, 8192, "bf16"), h100) == "compute"
    assert R.classify(R.elementwise(2**20), h100) == "memory"
    assert not h100.measured and "datasheet" in h100.source
    for fp8 in ("fp8", "float8_e4m3fn", "torch.float8_e5m2"):  # each dtype's own rate, not the fp32 one
        assert R.spec_ceilings("H100-SXM", fp8).tflops == 1978.9
    t4 = R.spec_ceilings("T4", "bf16")  # no bf16 tensor cores: the fp32 rate, and the source says so
    assert t4.tflops == 8.1 and "fp32 rate used" in t4.source


def test_predict_is_the_larger_of_the_two_times():
    c = R.Ceilings(gbps=1000.0, tflops=100.0, source="test")
    mem_op = R.elementwise(10**9, "float32")  # 8e9 bytes -> 8 ms at 1e12 B/s; 1e9 flops -> 10 µs
    p = R.predict(mem_op, c)
    assert p.bound == "memory" and p.seconds == pytest.approx(8e-3) and p.math_seconds == pytest.approx(1e-5)
    big = R.gemm(8192, 8192, 8192, "bf16")
    q = R.predict(big, c)
    assert q.bound == "compute" and q.seconds == pytest.approx(2 * 8192**3 / 1e14)
    assert q.attainable_tflops == pytest.approx(100.0)


def test_cpu_mode_ceilings_are_labelled_not_measured():
    if gpucourse.on_gpu():
        pytest.skip("CPU-mode labelling")
    c = R.device_ceilings()
    assert not c.measured and c.source.startswith("illustrative, CPU mode")
    with pytest.raises(gpucourse.GPURequiredError):
        R.measured_ceilings()


def test_table_lists_every_op_and_the_ratio():
    c = R.spec_ceilings("A100-80GB")
    text = R.table([R.elementwise(10, name="relu"), R.gemm(64, 64, 64, "bf16")], c)
    assert "relu" in text and "GEMM 64x64x64" in text and f"{R.ops_per_byte(c):.0f} flop/B" in text


def test_times_and_counts_keep_three_digits_at_every_scale():
    """A tiny op printed "0.0 µs": each time picks its unit, from femtoseconds to seconds."""
    f = R.format_seconds
    assert [f(4.13e-5), f(1.0641e-3), f(7.094e-4), f(3.82e-11), f(4.78e-13), f(2.5)] == \
        ["41.3 µs", "1.06 ms", "709 µs", "38.2 ps", "478 fs", "2.5 s"]
    assert f(9.9996e-4) == "1 ms" and f(0) == "0 s" and f(1234.5) == "1,234 s"
    assert R.format_count(17.18e9, "FLOP") == "17.2 GFLOP" and R.format_count(128, "B") == "128 B"
    assert R.format_count(16, "") == "16"
    tiny = R.predict(R.elementwise(16, "float32"), R.spec_ceilings("H100-SXM"))
    assert "0.0" not in f(tiny.seconds) and f(tiny.seconds).endswith("ps")


def _label_boxes(ax):
    """Window extents of the op labels (the annotations whose text names a bound), drawn."""
    from matplotlib.text import Text

    ax.figure.canvas.draw()
    r = ax.figure.canvas.get_renderer()
    return [(t.get_text(), Text.get_window_extent(t, r)) for t in ax.texts if t.get_text().endswith("bound)")
            or t.get_text().endswith("(memory)") or t.get_text().endswith("(compute)")]


def test_roofline_labels_do_not_overlap_and_the_title_is_whole():
    """Lesson 03's CPU-mode plot printed its three compute-bound GEMMs' names on top of one another, past the right
    edge, and cut its title mid-word at 60 characters."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpucourse.lessons.l03_memory_hierarchy import measure

    c = dataclasses.replace(R.spec_ceilings("H100-SXM", fp32=True), source="illustrative, CPU mode: datasheet "
                            "NVIDIA H100 SXM5 80GB (NVIDIA H100 datasheet (nvidia.com/x), SXM column; sparse halved)")
    ops = measure.default_ops("gpu", None)
    ax = R.plot_roofline([{"op": op} for op in ops], c)
    boxes = _label_boxes(ax)
    assert len(boxes) == len(ops)
    frame = ax.get_window_extent()
    for i, (name, a) in enumerate(boxes):
        assert frame.x0 <= a.x0 and a.x1 <= frame.x1 and frame.y0 <= a.y0 and a.y1 <= frame.y1, f"{name} leaves the axes"
        for other, b in boxes[i + 1:]:
            assert not a.overlaps(b), f"{name!r} overlaps {other!r}"
    title = ax.get_title()
    assert title.replace("\n", " ").endswith("ceilings: illustrative, CPU mode: datasheet NVIDIA H100 SXM5 80GB")
    fig_box = ax.figure.get_window_extent()
    t = ax.title.get_window_extent()
    assert fig_box.x0 <= t.x0 and t.x1 <= fig_box.x1 and t.y1 <= fig_box.y1, "the title is cut"
    plt.close("all")


def test_the_working_set_plot_marks_l2_and_skips_sizes_without_a_figure():
    """Lesson 03's GPU cell: bandwidth against working set, the L2 size as a red line labelled in MiB; a size with no
    figure (None) does not break the label's placement."""
    import matplotlib

    matplotlib.use("Agg")
    ax = R.plot_working_set([2**20, 2**24, 2**28], [900.0, None, 2900.0], l2_bytes=50 * 2**20)
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.texts] == ["L2 = 50 MiB"]
    assert any(list(line.get_xdata()) == [50 * 2**20] * 2 for line in ax.get_lines())
