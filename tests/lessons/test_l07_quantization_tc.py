"""Lesson 07's tensor-core int4 GEMV (kernels.w4a16_tc_kernel, ``w4a16_gemv(..., tc=True)``) against the exact
product: in Triton's interpreter in CPU mode (its plain-Triton dequantization), on the GPU with the `gpu` marker (the
inline-PTX one, on a GPU of compute capability 9.0+). The H100 timings are benchmarks/explore_quant_tc.py's."""
from __future__ import annotations

import pytest
import torch

import gpucourse
from gpucourse.lessons.l07_quantization import kernels, packing, quant

DEV = gpucourse.torch_device()


def _case(m, n, k, gs, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    q, s = quant.quantize(w, 4, "group", gs)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    exact = x.double() @ (q.double() * s.double().repeat_interleave(gs, dim=1)).T
    return x.to(DEV), packing.pack_int4(q).to(DEV), s.to(DEV), exact


@pytest.mark.parametrize("m,n,k,gs,split", [(1, 77, 384, 128, 2), (1, 40, 256, 128, 1), (3, 45, 640, 128, 3),
                                             (16, 33, 512, 64, 5), (1, 50, 512, 256, 2)])
def test_tc_path_matches_the_exact_product(m, n, k, gs, split):
    if not kernels.tc_available(torch.empty(m, k, dtype=torch.bfloat16, device=DEV), gs):
        pytest.skip("the tensor-core path needs Triton's interpreter or a GPU of compute capability 9.0+")
    x, p, s, exact = _case(m, n, k, gs)
    cfg = {} if gpucourse.on_gpu() else {"BLOCK_N": 32}  # N not a multiple of the block in every case
    y = kernels.w4a16_gemv(x, p, s, gs, tc=True, SPLIT=split, **cfg)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    err = (y.double().cpu() - exact).abs().max() / exact.abs().max()
    assert float(err) < 8e-3  # one bf16 rounding of the output (2**-8 of the largest) and float32 sums
    again = kernels.w4a16_gemv(x, p, s, gs, tc=True, SPLIT=split, **cfg)  # the split-K counters were left zero
    assert torch.equal(y, again)
    rows = kernels.w4a16_gemv(x, p, s, gs, tc=False)  # the rows/dot paths: the same answer, within an ulp or so
    assert float((rows.double() - y.double()).abs().max() / exact.abs().max()) < 8e-3


def test_tc_path_is_refused_where_it_cannot_run():
    x, p, s, _ = _case(1, 8, 128, 32)
    with pytest.raises(ValueError, match="tensor-core path"):
        kernels.w4a16_gemv(x, p, s, 32, tc=True)  # group 32: a group's dots would have K = 8
    x16 = x.to(torch.float16)
    with pytest.raises(ValueError, match="tensor-core path"):
        kernels.w4a16_gemv(x16, p, s, 32, tc=True)
    assert kernels.w4a16_gemv(x16, p, s, 32).dtype == torch.float16  # the default picks another path


@pytest.mark.gpu
def test_gpu_tc_path_large_shape_matches_the_rows_path():
    if not kernels.tc_available(torch.empty(1, 4096, dtype=torch.bfloat16, device=DEV), 128):
        pytest.skip("needs a GPU of compute capability 9.0+")
    x, p, s, exact = _case(1, 4099, 4096, 128)
    y = kernels.w4a16_gemv(x, p, s, 128, tc=True)  # the H100 configuration: BLOCK_N 128, split-K
    assert float((y.double().cpu() - exact).abs().max() / exact.abs().max()) < 8e-3
    assert torch.equal(y, kernels.w4a16_gemv(x, p, s, 128, tc=True))
