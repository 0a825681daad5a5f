"""The int4 kit's layer (gpucourse.quant.Int4Linear, what lesson 11's decode loop calls): its result against the
float64 product of the weight it stands for, within lesson 07's tolerances, at small shapes whose N is no multiple of
a block (Triton's interpreter in CPU mode; the GPU with the `gpu` marker), and its errors for bad input."""
from __future__ import annotations

import pytest
import torch

import gpucourse
from gpucourse.quant import BACKENDS, Int4Linear, int4_unavailable, kernels, linear, packing, symmetric

DEV = gpucourse.torch_device()
TINYGEMM_HERE = int4_unavailable("tinygemm", torch.bfloat16, DEV) is None


def _weight(n, k, seed=0):
    return (torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05).to(DEV)


def _x(shape, dtype=torch.bfloat16, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEV)


def _ulps(y, exact):
    """Lesson 07's measure of a GEMV's error: the largest error relative to each exact value, in bf16 ulps."""
    return float(((y.float() - exact.float()).abs() / exact.float().abs().clamp_min(1e-3)).max()) * 128


def _exact(x, layer):
    """float64 x @ W_hat.T with the weight the layer stands for, rounded once to x's dtype."""
    return (x.double() @ layer.dequantized().double().T).to(x.dtype)


@pytest.mark.parametrize("n,k,g,lead", [(37, 192, 64, (3,)), (77, 256, 32, (2, 2)), (50, 384, 128, (1,)),
                                        (45, 640, 128, (5,))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lesson_backend_matches_the_exact_product(n, k, g, lead, dtype):
    layer = Int4Linear(_weight(n, k), g)
    x = _x((*lead, k), dtype)
    y = layer(x)
    assert y.shape == (*lead, n) and y.dtype == dtype and y.device == x.device
    assert _ulps(y, _exact(x, layer)) <= 1.0  # lesson 07's bound for w4a16_gemv
    # the kernel lesson 07 teaches, on the same packed weights: the layer adds nothing to the numbers
    x2 = x.reshape(-1, k)
    assert torch.equal(y.reshape(-1, n), kernels.w4a16_gemv(x2, layer.packed, layer.scales, g))


def test_the_weight_is_lesson_07s_quantization():
    w = _weight(40, 256, seed=3)
    w[2] = 0.0
    layer = Int4Linear(w, 64)
    q, s = symmetric.quantize(w, 4, "group", 64)
    assert torch.equal(layer.packed, packing.pack_int4(q)) and torch.equal(layer.scales, s)
    w_hat = layer.dequantized()
    assert w_hat.shape == (40, 256) and w_hat.dtype == torch.float32 and w_hat.device == w.device
    step = s.repeat_interleave(64, dim=1)
    assert bool(((w.float() - w_hat).abs() <= step / 2 * (1 + 1e-6)).all()) and not w_hat[2].any()
    assert layer.shape == (40, 256) and layer.backend == "lesson" and layer.group_size == 64
    if layer._tiled is None:  # the packed words and their scales
        assert layer.nbytes == 40 * 256 // 2 + 40 * (256 // 64) * 4
    else:
        assert layer.nbytes == layer._tiled.nbytes() >= 40 * 256 // 2 + 40 * (256 // 64) * 4


def test_lesson_backend_takes_the_tile_major_tc_path_where_the_gemv_would_take_tc(monkeypatch):
    """Where w4a16_gemv would take the tc path (a Hopper GPU; in CPU mode the interpreter's tc path switched on for
    the test, as lesson 07's tests do) the layer lays its weights out tile-major once, at construction, and every
    call reads that copy: the same numbers as the tc path on the row layout."""
    if not gpucourse.on_gpu():
        monkeypatch.setitem(kernels.CPU_CONFIGS, "w4_tc_max_m", 16)
    layer = Int4Linear(_weight(45, 384, seed=4), 128)
    x = _x((2, 384), seed=5)
    if kernels.w4a16_path(x, 128) != "tc":
        pytest.skip("no tc path on this GPU (not a Hopper GPU)")
    assert layer._tiled is not None and layer.nbytes == layer._tiled.nbytes()
    calls = []
    real = linear.w4a16_tiled
    monkeypatch.setattr(linear, "w4a16_tiled", lambda *a, **kw: calls.append(a[1]) or real(*a, **kw))
    monkeypatch.setattr(linear, "tile_major", lambda *a, **kw: pytest.fail("laid out again on a call"))
    y = layer(x)
    assert calls == [layer._tiled]
    assert torch.equal(y, kernels.w4a16_gemv(x, layer.packed, layer.scales, 128, tc=True))
    exact = x.double() @ layer.dequantized().double().T
    assert float((y.double() - exact).abs().max() / exact.abs().max()) < 8e-3  # lesson 07's tc bound
    h = x.half()  # fp16: no tc path; the packed weights, the rows path
    assert torch.equal(layer(h), kernels.w4a16_gemv(h, layer.packed, layer.scales, 128)) and len(calls) == 1


@pytest.mark.skipif(not TINYGEMM_HERE, reason="this torch has no tinygemm for this device")
@pytest.mark.parametrize("n,k,g,lead", [(48, 384, 128, (3,)), (32, 192, 64, (2, 2)), (16, 96, 32, (1,))])
def test_tinygemm_backend_matches_the_exact_product(n, k, g, lead):
    layer = Int4Linear(_weight(n, k, seed=6), g, backend="tinygemm")
    x = _x((*lead, k), seed=7)
    y = layer(x)
    assert y.shape == (*lead, n) and y.dtype == torch.bfloat16
    exact = x.double() @ layer.dequantized().double().T
    assert float((y.double() - exact).abs().max() / exact.abs().max()) < 1e-2  # lesson 07's tinygemm bound
    # its weight: the same int4 values with the scales rounded to bf16 (tinygemm's format)
    lesson_w = symmetric.dequantize(packing.unpack_int4_torch(layer.packed), layer.scales, g)
    assert torch.equal(layer.dequantized(), symmetric.dequantize(packing.unpack_int4_torch(layer.packed),
                                                                 layer.scales.bfloat16().float(), g))
    assert float((layer.dequantized() - lesson_w).abs().max()) <= float(layer.scales.max()) * 7 * 2 ** -8
    assert layer.nbytes == n * k // 2 + (k // g) * n * 2 * 2  # the packed words, bf16 (scale, zero) pairs
    with pytest.raises(TypeError, match="bf16"):
        layer(x.half())


def test_leading_dims_are_flattened_and_restored():
    layer = Int4Linear(_weight(33, 128, seed=8), 32)
    x = _x((2, 3, 128), seed=9)
    y = layer(x)
    assert y.shape == (2, 3, 33)
    assert torch.equal(y.reshape(6, 33), layer(x.reshape(6, 128)))
    assert torch.equal(layer(x[1, 2]), y[1, 2])  # a single vector: (K,) -> (N,)
    assert layer(x[:0]).shape == (0, 3, 33)


def test_bad_input_is_refused_clearly():
    w = _weight(40, 256)
    with pytest.raises(ValueError, match="not a multiple of group_size 96"):
        Int4Linear(w, 96)
    with pytest.raises(ValueError, match="power of two"):
        Int4Linear(_weight(8, 192), 48)  # divides K, but the lesson's kernel takes powers of two
    with pytest.raises(ValueError, match="backend must be one of"):
        Int4Linear(w, 64, backend="marlin")
    with pytest.raises(ValueError, match="2-D floating-point"):
        Int4Linear(w[0], 64)
    with pytest.raises(ValueError, match="2-D floating-point"):
        Int4Linear(w.to(torch.int8), 64)
    with pytest.raises(TypeError, match="torch.Tensor"):
        Int4Linear(w.tolist(), 64)
    layer = Int4Linear(w, 64)
    with pytest.raises(ValueError, match=r"K = 256 .* got shape \(2, 128\)"):
        layer(_x((2, 128)))
    with pytest.raises(TypeError, match="bfloat16 or float16 activations, not float32"):
        layer(_x((2, 256), torch.float32))
    with pytest.raises(ValueError, match="is on meta"):
        layer(torch.empty(2, 256, dtype=torch.bfloat16, device="meta"))
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer([[0.0] * 256])


def test_int4_unavailable_says_why(monkeypatch):
    assert int4_unavailable("lesson", torch.bfloat16, DEV) is None and BACKENDS == ("lesson", "tinygemm")
    assert "one of" in int4_unavailable("marlin", torch.bfloat16, DEV)
    assert "bfloat16 or float16" in int4_unavailable("lesson", torch.float32, DEV)
    assert "bf16" in int4_unavailable("tinygemm", torch.float16, DEV)
    monkeypatch.setattr(linear, "INTERPRETED", False)  # a CPU tensor with the interpreter off: no Triton kernel runs
    why = int4_unavailable("lesson", torch.bfloat16, "cpu")
    assert "CUDA GPU" in why and "interpreter" in why
    with pytest.raises(RuntimeError, match="'lesson' int4 backend cannot run here: .*interpreter"):
        Int4Linear(torch.randn(8, 64), 32)
    monkeypatch.delattr(torch, "_weight_int4pack_mm_for_cpu", raising=False)  # an old torch
    assert "no torch._weight_int4pack_mm_for_cpu" in int4_unavailable("tinygemm", torch.bfloat16, "cpu")
    with pytest.raises(RuntimeError, match="'tinygemm' int4 backend cannot run here: .*_for_cpu"):
        Int4Linear(torch.randn(16, 128), 32, backend="tinygemm")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_a_call_replays_in_a_cuda_graph(backend):
    """Lesson 11 captures its decode step: a call must make no host sync and read only what construction made."""
    if int4_unavailable(backend, torch.bfloat16, DEV):
        pytest.skip(int4_unavailable(backend, torch.bfloat16, DEV))
    layer = Int4Linear(_weight(1000, 2048, seed=10).bfloat16(), 128, backend=backend)
    x = _x((1, 2048), seed=11)
    eager = layer(x)  # compiles Triton's kernels before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer(x)
    x.copy_(_x((1, 2048), seed=12))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, layer(x)) and not torch.equal(out, eager)


def test_the_grader_treats_the_kit_package_as_the_course_s_own_code():
    """A submission that imports the kit's quantized kernels (gpucourse.quant, lesson 07's kernels under the kit's
    name) is the course's code, as importing them from the lesson is; the kit's other modules are the learner's."""
    from gpucourse.grading import flags

    kit = ["from gpucourse.quant.kernels import w4a16_gemv", "from gpucourse.quant import kernels",
           "import gpucourse.quant.kernels as k", "from gpucourse import quant",
           "import importlib\nk = importlib.import_module('gpucourse.quant.kernels')"]
    for source in kit:
        assert flags.course_code_used(source), source
        assert "source imports the course's lessons (the instructor's own kernels and helpers)" in \
            flags.static_flags(source), source
    for source in ("from gpucourse import timing, syncs", "import gpucourse.timing as t", "x = 'gpucourse.quantile'",
                   "from gpucourse.lessons.l07_quantization.exercises import int8_gemv"):
        assert not flags.course_code_used(source), source
    assert any("monkeypatches the course's helpers" in f
               for f in flags.static_flags("from gpucourse.quant import kernels\nkernels.CONFIGS = {}"))
