"""gpucourse.roofline: the intensity formulas against hand computations, the bound classification and predictions.
(Lesson 03's helpers built on it are tested in tests/lessons/test_l03_memory_hierarchy.py.)"""
from __future__ import annotations

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
