"""gpucourse.roofline: the intensity formulas against hand computations, the bound classification, predictions,
and the helpers of lesson 03 (access-pattern sector counts, fusion traffic, the explorer's static path)."""
from __future__ import annotations

import math

import pytest

import gpucourse
from gpucourse import roofline as R
from gpucourse.lessons.l03_memory_hierarchy import access, explorer as widgets, fusion


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


def test_sector_counts():
    coalesced = access.offsets("coalesced", 1024)
    assert access.sectors_per_warp(coalesced) == 4 and access.efficiency(coalesced) == 1.0
    assert access.sectors_per_warp(access.offsets("strided", 1024, 2)) == 8
    assert access.efficiency(access.offsets("strided", 1024, 8)) == 1 / 8
    assert access.sectors_per_warp(access.offsets("coalesced", 1024), elem_bytes=2) == 2  # fp16: 64 B per warp
    rnd = access.offsets("random", 1024, src_len=2**20)
    assert sorted(set(access.offsets("random", 2**10, src_len=2**10))) == list(range(2**10))  # a permutation
    assert access.efficiency(rnd) < 0.2


@pytest.mark.parametrize("pattern,stride", [("coalesced", 1), ("strided", 3), ("random", 1)])
def test_read_pattern_kernel_matches_torch(pattern, stride):
    import torch

    src = torch.randn(2**12, device=gpucourse.torch_device())
    got = access.read_pattern(src, 1000, pattern, stride)
    want = src[torch.tensor(access.offsets(pattern, 1000, stride, src.numel()), device=src.device)]
    assert torch.equal(got, want) and torch.equal(access.read_pattern_torch(src, 1000, pattern, stride), want)
    with pytest.raises(ValueError):
        access.read_pattern(src, 2000, "strided", 4)  # needs 7997 elements


def test_fused_kernels_match_eager():
    import torch

    dev = gpucourse.torch_device()
    x = torch.randn(3001, device=dev)
    # float32 sin is an approximation whose last bits differ between libraries (CUDA's, torch's, and numpy's in
    # the interpreter, which vary with the CPU): a CI machine measured 4e-5 between interpreter and eager. Both are
    # held to a float64 reference instead, at a tolerance that a wrong chain (three sines, not four) misses by over 500x.
    tol = 1e-4
    want = fusion.sin4_eager(x.double())
    torch.testing.assert_close(fusion.sin4_triton(x).double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(fusion.sin4_eager(x).double(), want, rtol=tol, atol=tol)
    assert (torch.sin(torch.sin(torch.sin(x.double()))) - want).abs().max() > 500 * tol  # the tolerance has teeth
    xl, r = torch.randn(5, 300, device=dev), torch.randn(5, 300, device=dev)
    w, b = torch.randn(300, device=dev), torch.randn(300, device=dev)
    torch.testing.assert_close(fusion.ln_relu_add_triton(xl, w, b, r), fusion.ln_relu_add_eager(xl, w, b, r),
                               rtol=1e-5, atol=1e-5)


def test_fusion_traffic():
    t = fusion.traffic("swish_residual", 100, 4)
    assert t == {"eager": 8 * 400, "fused": 3 * 400}
    assert fusion.traffic("sin4", 10, 2)["eager"] == 4 * fusion.traffic("sin4", 10, 2)["fused"]
    with pytest.raises(ValueError):
        fusion.traffic("nope", 1, 4)


def test_explorer_static_path_prints_and_plots(capsys):
    import matplotlib

    matplotlib.use("Agg")
    c = R.spec_ceilings("H100-SXM")
    assert widgets.roofline_explorer(c, interactive=False) is None
    out = capsys.readouterr().out
    assert "GEMM 8192x128x8192" in out and "memory-bound" in out and "124.12" in out
    op = widgets.make_op({"kind": "elementwise", "n": 1024, "inputs": 2, "dtype": "float32"})
    assert op.name.startswith("add") and op.intensity == pytest.approx(1 / 12)
    text = widgets.describe(op, c, measured_seconds=2 * R.predict(op, c).seconds)
    assert "2.00x the prediction" in text
    assert math.isclose(R.predict(op, c).seconds, op.bytes / 3350e9)
