"""Lesson 07: quantization, int4 packing, the W8A16/W4A16 kernels (interpreter in CPU mode, the GPU with the `gpu`
marker), the workbook's solutions against their checks, the exercise inputs' edge cases, and the measurement code
paths. The known submissions' verdicts are tests/test_known_submissions.py's."""
from __future__ import annotations

import pytest
import torch

import gpucourse
from gpucourse.grading.exercise import DEFAULT_TOLERANCE
from gpucourse.lessons.l07_quantization import bench, gemv_inputs, measure, quant
from gpucourse.quant import kernels, packing
from gpucourse.quant import linear as quant_linear
from gpucourse.solutions import load_solutions

DEV = gpucourse.torch_device()


# --- quantization -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("gran,gs", [("tensor", None), ("channel", None), ("group", 32)])
def test_quantize_round_trip_is_within_half_a_step(bits, gran, gs):
    w = torch.randn(24, 96) * torch.rand(24, 1) * 3
    w[5] = 0.0
    q, s = quant.quantize(w, bits, gran, gs)
    assert q.dtype == torch.int8 and s.dtype == torch.float32
    assert int(q.abs().max()) <= quant.qmax(bits)
    full = quant.dequantize(q, s, gs)
    step = (s if s.dim() == 0 else s[:, None] if s.dim() == 1 else s.repeat_interleave(gs, dim=1))
    assert bool(((w - full).abs() <= step / 2 * (1 + 1e-6)).all())
    assert torch.isfinite(s).all() and bool((full[5] == 0).all())


def test_quantize_shapes_and_errors():
    w = torch.randn(8, 64)
    assert quant.quantize(w, 8, "tensor")[1].shape == ()
    assert quant.quantize(w, 8, "channel")[1].shape == (8,)
    assert quant.quantize(w, 4, "group", 16)[1].shape == (8, 4)
    with pytest.raises(ValueError, match="divides K"):
        quant.quantize(w, 4, "group", 48)
    with pytest.raises(ValueError, match="bits"):
        quant.quantize(w, 9, "channel")
    with pytest.raises(ValueError, match="2-D"):
        quant.quantize(torch.randn(64), 8)


def test_one_outlier_ruins_a_per_tensor_scale_not_a_per_row_one():
    w = torch.randn(16, 256)
    w[3, 7] = 500.0
    other = torch.arange(16) != 3
    errs = {g: quant.errors(w[other], quant.dequantize(*quant.quantize(w, 8, g))[other])["rel_fro"]
            for g in ("tensor", "channel")}
    assert errs["tensor"] > 0.5 and errs["channel"] < 0.01, errs


def test_error_table_orders_int4_granularities():
    rows = {(r["bits"], r["granularity"], r["group_size"]): r for r in quant.error_table(torch.randn(64, 512))}
    assert rows[(4, "group", 32)]["rel_fro"] < rows[(4, "channel", None)]["rel_fro"] < \
        rows[(4, "tensor", None)]["rel_fro"]
    assert rows[(8, "channel", None)]["rel_fro"] < rows[(4, "group", 32)]["rel_fro"]


# --- packing ------------------------------------------------------------------------------------------------------

def test_pack_unpack_round_trip_every_value_and_layout():
    q = (torch.arange(16 * 32).reshape(16, 32) % 16 - 8).to(torch.int8)
    p = packing.pack_int4(q)
    assert p.dtype == torch.uint8 and p.shape == (16, 16)
    assert int(p[0, 0]) == ((int(q[0, 0]) & 0xF) | ((int(q[0, 1]) & 0xF) << 4))
    assert torch.equal(packing.unpack_int4_torch(p), q)
    assert torch.equal(packing.unpack_int4(p.to(DEV)).cpu(), q)


def test_unpack_every_byte_matches_torch():
    every = torch.arange(256).to(torch.uint8).reshape(8, 32)
    assert torch.equal(packing.unpack_int4(every.to(DEV)).cpu(), packing.unpack_int4_torch(every))
    assert packing.unpack_int4_torch(torch.tensor([[0xF8]], dtype=torch.uint8)).tolist() == [[-8, -1]]


def test_pack_refuses_odd_k_and_out_of_range():
    with pytest.raises(ValueError, match="odd"):
        packing.pack_int4(torch.zeros(3, 5, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        packing.pack_int4(torch.full((2, 2), 8, dtype=torch.int8))
    with pytest.raises(TypeError, match="int8"):
        packing.pack_int4(torch.zeros(2, 2))


def test_bit_layout_picture():
    text = packing.bit_layout((3, -2), show=False)
    assert "0xE3" in text and "1110" in text and "0011" in text
    with pytest.raises(ValueError):
        packing.bit_layout((9, 0), show=False)


# --- kernels --------------------------------------------------------------------------------------------------------

def _ulps(y, exact):
    return float(((y.float() - exact.float()).abs() / exact.float().abs().clamp_min(1e-3)).max()) * 128


@pytest.mark.parametrize("m,n,k", [(1, 77, 256), (5, 33, 1000), (16, 64, 384)])
@pytest.mark.parametrize("rows", [True, False])
def test_w8a16_matches_the_exact_product(m, n, k, rows):
    x = torch.randn(m, k).to(torch.bfloat16).to(DEV)
    q, s = quant.quantize(torch.randn(n, k).to(DEV), 8, "channel")
    assert _ulps(kernels.w8a16_gemv(x, q, s, rows=rows), kernels.reference_gemv(x, quant.dequantize(q, s))) <= 1.0


@pytest.mark.parametrize("m,n,k,gs", [(1, 77, 256, 32), (5, 33, 384, 128), (16, 64, 640, 64)])
@pytest.mark.parametrize("rows", [True, False])
def test_w4a16_matches_the_exact_product(m, n, k, gs, rows):
    x = torch.randn(m, k).to(torch.bfloat16).to(DEV)
    q, s = quant.quantize(torch.randn(n, k).to(DEV), 4, "group", gs)
    y = kernels.w4a16_gemv(x, packing.pack_int4(q), s, gs, rows=rows)
    assert _ulps(y, kernels.reference_gemv(x, quant.dequantize(q, s, gs))) <= 1.0


def test_kernels_refuse_bad_inputs_clearly():
    x = torch.randn(1, 64).to(torch.bfloat16).to(DEV)
    q, s = quant.quantize(torch.randn(8, 64).to(DEV), 8, "channel")
    p = packing.pack_int4(torch.zeros(8, 64, dtype=torch.int8, device=DEV))
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        kernels.w8a16_gemv(x.float(), q, s)
    with pytest.raises(ValueError, match="2-D"):
        kernels.w8a16_gemv(x[0], q, s)
    with pytest.raises(ValueError, match="K = 32 columns"):
        kernels.w8a16_gemv(x[:, :32], q, s)
    with pytest.raises(ValueError, match="one per row"):
        kernels.w8a16_gemv(x, q, s[:3])
    with pytest.raises(TypeError, match="int8"):
        kernels.w8a16_gemv(x, q.float(), s)
    with pytest.raises(ValueError, match="power of two"):
        kernels.w4a16_gemv(x, p, torch.ones(8, 2, device=DEV), 24)
    with pytest.raises(ValueError, match="does not divide"):
        kernels.w4a16_gemv(torch.randn(1, 96).to(torch.bfloat16).to(DEV),
                           packing.pack_int4(torch.zeros(8, 96, dtype=torch.int8, device=DEV)),
                           torch.ones(8, 1, device=DEV), 64)
    with pytest.raises(ValueError, match=r"scales must be float32 of shape \(8, 2\)"):
        kernels.w4a16_gemv(x, p, torch.ones(8, 3, device=DEV), 32)
    with pytest.raises(TypeError, match="uint8"):
        kernels.w4a16_gemv(x, p.to(torch.int8), torch.ones(8, 2, device=DEV), 32)


def test_the_lesson_names_its_notebook_and_specs_import_are_the_kit_s_objects():
    """The kernels, packing and quantization live in the kit (gpucourse.quant, shared with lesson 11); the lesson's
    modules of those names still give the names its notebook, its exercise specs and the known submissions import,
    as the kit's own objects (a trap set on one is set on the other)."""
    import gpucourse.quant
    from gpucourse.lessons.l07_quantization import kernels as old_kernels
    from gpucourse.lessons.l07_quantization import packing as old_packing

    names = {old_kernels: (gpucourse.quant.kernels, ["gemv_bytes", "reference_gemv", "tc_available", "w4a16_gemv",
                                                     "w4a16_path", "w8a16_gemv", "_PAIR_ASM", "_group_dot",
                                                     "_int4_pairs", "field_to_float", "w4a16_tc_kernel"]),
             old_packing: (gpucourse.quant.packing, ["bit_layout", "pack_int4", "unpack_int4", "unpack_int4_torch"]),
             quant: (gpucourse.quant.symmetric, ["quantize", "dequantize", "qmax", "_scale_of"])}
    for old, (kit, used) in names.items():
        for name in used:
            assert getattr(old, name) is getattr(kit, name), f"{old.__name__}.{name}"


def test_gemv_bytes():
    assert kernels.gemv_bytes(1, 8, 256, "bf16") == 2 * 8 * 256 + 2 * 256 + 2 * 8
    assert kernels.gemv_bytes(1, 8, 256, "int4", 128) == 8 * 128 + 4 * 8 * 2 + 2 * 256 + 2 * 8
    with pytest.raises(ValueError):
        kernels.gemv_bytes(1, 8, 256, "fp8")


# --- the workbook's solutions and the exercises' inputs ---------------------------------------------------------------

def test_reference_solutions_from_the_workbook_pass_check():
    ns = load_solutions("07_quantization")
    for exercise in ("quantize_per_channel", "pack_int4", "unpack_int4", "int8_gemv", "int4_gemv"):
        result = gpucourse.check(exercise, ns[exercise], quiet=True)
        assert result.passed, result.report()


def test_workbook_solutions_agree_with_the_lesson_kernels():
    ns = load_solutions("07_quantization")
    x = torch.randn(3, 384).to(torch.bfloat16).to(DEV)
    w = torch.randn(50, 384).to(DEV)
    q8, s8 = quant.quantize(w, 8, "channel")
    assert _ulps(ns["int8_gemv"](x, q8, s8), kernels.w8a16_gemv(x, q8, s8)) <= 1.0
    q4, s4 = quant.quantize(w, 4, "group", 128)
    p4 = packing.pack_int4(q4)
    assert _ulps(ns["int4_gemv"](x, p4, s4, 128), kernels.w4a16_gemv(x, p4, s4, 128)) <= 1.0


def _fails_tolerance(got, exact):
    tol = DEFAULT_TOLERANCE["bfloat16"]
    bound = tol.atol_scale * exact.abs().max() + tol.rtol * exact.abs()
    return bool(((got - exact).abs() > bound).any())


def _bf16_running_sum(x, w, chunk):
    """x @ w.T with the running sum over chunks of K rounded to bfloat16 after each add (fp32 within a chunk)."""
    acc = torch.zeros(x.shape[0], w.shape[0], dtype=torch.bfloat16)
    for k0 in range(0, x.shape[1], chunk):
        acc = (acc.float() + x[:, k0:k0 + chunk].double().matmul(w[:, k0:k0 + chunk].double().T).float()).bfloat16()
    return acc.double()


def test_cancelling_case_catches_bf16_accumulation_and_int8_bf16_weights_only():
    g = torch.Generator().manual_seed(0)
    x = gemv_inputs.activations(2, 4096, g, "cancelling")
    q8, s8 = gemv_inputs.int8_weights(64, 4096, g, "cancelling")
    w8 = gemv_inputs.dequant_int8(q8, s8)
    exact = gemv_inputs.exact(x, w8).double()
    assert not _fails_tolerance((x.double() @ w8.T).bfloat16().double(), exact)
    assert _fails_tolerance(_bf16_running_sum(x, w8, 128), exact)  # bf16 partial sums
    assert _fails_tolerance((x.double() @ w8.bfloat16().double().T).bfloat16().double(), exact)  # bf16 weights
    q4, p4, s4 = gemv_inputs.int4_weights(64, 4096, 128, g, "cancelling")
    w4 = gemv_inputs.dequant_int4(q4, s4, 128)
    exact4 = gemv_inputs.exact(x, w4).double()
    assert _fails_tolerance(_bf16_running_sum(x, w4, 128), exact4)
    # int4 values times a scale lose little when rounded to bf16: a kernel that does that is not failed for it
    assert not _fails_tolerance((x.double() @ w4.bfloat16().double().T).bfloat16().double(), exact4)
    # and on random inputs the bf16 accumulation would go unnoticed, which is why the case exists
    xr, (qr, sr) = gemv_inputs.activations(2, 512, g), gemv_inputs.int8_weights(64, 512, g)
    wr = gemv_inputs.dequant_int8(qr, sr)
    assert not _fails_tolerance(_bf16_running_sum(xr, wr, 512), gemv_inputs.exact(xr, wr).double())


# --- measurement code paths (CPU: the paths, not the figures) and benchmark targets --------------------------------

def test_measure_paths_run_small():
    res = measure.peers(shapes=((64, 256),), bench_kw=measure.QUICK, rounds=1,
                        extra={measure.INT8_LESSON: kernels.w8a16_gemv})
    row = res["rows"][0]
    assert {measure.BF16, measure.INT8_SOLUTION, measure.INT4_SOLUTION, measure.INT8_LESSON, measure.TINYGEMM,
            measure.NAIVE8, measure.NAIVE4} <= set(row["us"])
    assert max(row["max_rel_err"].values()) < 0.02
    names = list(row["us"])  # the tables' order: bf16, the int8 rows, then the int4 rows, then the naive paths
    assert names.index(measure.INT8_LESSON) < names.index(measure.TINYGEMM) < names.index(measure.INT4_SOLUTION)
    assert names.index(measure.INT4_SOLUTION) < names.index(measure.NAIVE8)
    lib = measure.peers(shapes=((64, 256),), bench_kw=measure.QUICK, rounds=1, library=False)
    assert measure.TINYGEMM not in lib["rows"][0]["us"]  # the torchao run leaves the library peers out
    sw = measure.batch_sweep(32, 256, ms=(1, 8), bench_kw=measure.QUICK)
    assert len(sw["us"][measure.INT4_LESSON]) == 2 and len(sw["us"][measure.TINYGEMM]) == 2
    cfg = kernels.configs()
    assert sw["x_rows_per_block"]["int8"] == [1 if m <= cfg["w8_rows_max_m"] else
                                              cfg[kernels.w8_config_name(m, False)]["BLOCK_M"] for m in (1, 8)]
    assert all(r >= 1 for r in sw["x_rows_per_block"]["int4"])
    mlp = measure.mlp_decode(128, 256, bench_kw=measure.QUICK, rounds=1, group_size=64)
    assert mlp["errors"]["bf16"]["rel_fro"] == 0 < mlp["errors"]["int8"]["rel_fro"] < mlp["errors"]["int4"]["rel_fro"]
    assert mlp["weight_mb"]["int4"] < mlp["weight_mb"]["int8"] < mlp["weight_mb"]["bf16"]
    # the tinygemm block runs the same int4 values with bf16 scales: its output error is the lesson block's, nearly
    tg = mlp["errors"][measure.TINYGEMM]["rel_fro"]
    assert abs(tg - mlp["errors"]["int4"]["rel_fro"]) < 0.05 * mlp["errors"]["int4"]["rel_fro"] and not mlp["notes"]
    fe = measure.flush_effect(64, 256, bench_kw=measure.QUICK, rounds=1)
    assert set(fe["us"]) == {"write", "read"} and set(fe["us"]["read"]) == {measure.BF16, measure.INT8_LESSON,
                                                                           measure.INT4_LESSON}
    assert fe["bytes"][measure.INT4_LESSON] == kernels.gemv_bytes(1, 64, 256, "int4", 128)


def test_measure_paths_run_in_fp16_where_the_gate_falls_back(monkeypatch, capsys):
    """On a GPU without bf16 tensor cores (a T4, faked here: the kernels run in the interpreter) the activations and
    the unquantized weights are float16, and the measurement says why; tinygemm (bf16 only) is left out, saying so."""
    from gpucourse import device

    t4 = device.DeviceProps("Tesla T4", 7, 5, 40, 15 * 2**30, 4 * 2**20)
    monkeypatch.setattr(device, "props", lambda index=None: t4)
    assert measure.quantized_weights(16, 256)["w"].dtype == torch.float16
    assert measure.MLPBlock(64, 128, "int8").weights[0].dtype == torch.float16
    seen = []
    real = kernels.w8a16_gemv
    monkeypatch.setattr(kernels, "w8a16_gemv", lambda x, *a, **k: seen.append(x.dtype) or real(x, *a, **k))
    sw = measure.batch_sweep(32, 256, ms=(1, 4), bench_kw=measure.QUICK)
    assert set(seen) == {torch.float16} and len(sw["us"][measure.INT8_LESSON]) == 2 and sw["dtype"] == "float16"
    assert measure.TINYGEMM not in sw["us"]
    assert "Tesla T4 (sm_75) has no bf16 tensor cores" in capsys.readouterr().out
    mlp = measure.mlp_decode(128, 256, bench_kw=measure.QUICK, rounds=1, group_size=64)
    assert 0 < mlp["errors"]["int8"]["rel_fro"] < mlp["errors"]["int4"]["rel_fro"] < 0.2 and mlp["dtype"] == "float16"
    assert "bf16" in mlp["notes"][measure.TINYGEMM] and measure.TINYGEMM not in mlp["us"]
    res = measure.peers(shapes=((64, 256),), bench_kw=measure.QUICK, rounds=1)
    assert measure.TINYGEMM not in res["rows"][0]["us"] and "bf16" in res["notes"][measure.TINYGEMM]


# --- the peers: tinygemm's format and the compiled one-liner --------------------------------------------------------

def _tinygemm_case(n=32, k=256, g=64, m=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    q[0, :16] = torch.arange(-8, 8, dtype=torch.int8)  # every value, in both nibbles of a byte
    s = 0.01 + torch.rand(n, k // g, generator=gen)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    return q, packing.pack_int4(q), s, x


def test_tinygemm_bytes_hold_q_plus_8_with_the_even_column_high():
    """tinygemm's input bytes (pytorch's common_quantization `_group_quantize_tensor`: out[:, ::2] << 4 |
    out[:, 1::2], values u = q + 8 in 0..15) from pack_int4's (even column low, two's complement)."""
    q, p, _, _ = _tinygemm_case()
    tb = measure.tinygemm_bytes(p)
    u = q.to(torch.int16) + 8
    assert tb.dtype == torch.uint8 and tb.shape == p.shape
    assert torch.equal(tb.to(torch.int16), (u[:, 0::2] << 4) | u[:, 1::2])
    # every byte value: the map is a bijection (a nibble swap after flipping both top bits)
    every = torch.arange(256, dtype=torch.int64).to(torch.uint8).reshape(1, 256)
    assert sorted(measure.tinygemm_bytes(every).flatten().tolist()) == list(range(256))
    # q = (3, -2) -> u = (11, 6), the even column's in the high nibble
    assert measure.tinygemm_bytes(torch.tensor([[0xE3]], dtype=torch.uint8)).item() == 0xB6
    with pytest.raises(TypeError, match="uint8"):
        measure.tinygemm_bytes(q)


def test_tinygemm_scales_and_zeros_layout():
    s = torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1  # (N = 3, K / g = 4)
    sz = measure.tinygemm_scales_and_zeros(s)
    assert sz.shape == (4, 3, 2) and sz.dtype == torch.bfloat16 and sz.is_contiguous()
    assert torch.equal(sz[..., 0].float(), s.t()) and not sz[..., 1].any()  # [K / g, N, (scale, zero = 0)]


@pytest.mark.skipif(measure.tinygemm_unavailable(torch.bfloat16, DEV) is not None,
                    reason="this torch has no tinygemm for this device")
@pytest.mark.parametrize("g", [32, 64, 128])
def test_tinygemm_computes_the_product_of_the_course_int4_weights(g):
    """The convention checked end to end (on the CPU: torch's CPU twin of the kernel, which takes the values u; on a
    GPU: the kernel itself): tinygemm on the course's symmetric int4 weights gives the exact product of the dequantized
    weights with bf16 scales, within its bf16 dequantization; the other zero-point convention (zero = 8 * scale) is
    far off, so the check can fail."""
    q, p, s, x = _tinygemm_case(g=g, k=256 if g < 128 else 384 + 128)
    p, s, x = p.to(DEV), s.to(DEV), x.to(DEV)
    tg = measure.tinygemm_weights(p, s, g)
    y = measure.tinygemm_mm(x, tg)
    assert y.shape == (x.shape[0], q.shape[0]) and y.dtype == torch.bfloat16
    sb = s.to(torch.bfloat16).double().cpu()
    exact = x.double().cpu() @ (q.double() * sb.repeat_interleave(g, dim=1)).T
    err = float((y.double().cpu() - exact).abs().max() / exact.abs().max())
    assert err < 1e-2, err
    wrong = dict(tg, scales_and_zeros=tg["scales_and_zeros"].clone())
    wrong["scales_and_zeros"][..., 1] = 8 * wrong["scales_and_zeros"][..., 0]
    assert float((measure.tinygemm_mm(x, wrong).double().cpu() - exact).abs().max() / exact.abs().max()) > 0.1


def test_tinygemm_int4_converts_each_weight_once_and_again_after_a_change(monkeypatch):
    """measure.tinygemm_int4 (tinygemm with the int4 GEMVs' arguments) keeps a weight's converted copy, as a model
    loader would, and converts again when the weight was changed in place."""
    if measure.tinygemm_unavailable(torch.bfloat16, DEV) is not None:
        pytest.skip("this torch has no tinygemm for this device")
    _, p, s, x = _tinygemm_case(g=64)
    p, s, x = p.to(DEV), s.to(DEV), x.to(DEV)
    calls = []
    real = quant_linear.tinygemm_weights  # what Int4Linear.from_int4 converts with
    monkeypatch.setattr(quant_linear, "tinygemm_weights", lambda *a, **k: calls.append(a) or real(*a, **k))
    a = measure.tinygemm_int4(x, p, s, 64)
    b = measure.tinygemm_int4(x, p, s, 64)
    assert len(calls) == 1 and torch.equal(a, b)
    p[0, 0] ^= 0x11  # in place: the converted copy is stale
    c = measure.tinygemm_int4(x, p, s, 64)
    assert len(calls) == 2 and not torch.equal(a, c)


def test_tinygemm_weights_refuse_what_the_kernel_cannot_take():
    _, p, s, _ = _tinygemm_case(n=32, k=256, g=64)
    with pytest.raises(ValueError, match="groups of 32, 64, 128 or 256"):
        measure.tinygemm_weights(p, torch.ones(32, 2), 128 + 64)
    with pytest.raises(ValueError, match="N a multiple of"):
        measure.tinygemm_weights(p[:20], s[:20], 64)
    with pytest.raises(ValueError, match="inner_k_tiles"):
        measure.tinygemm_weights(p, s, 64, inner_k_tiles=3)
    with pytest.raises(ValueError, match="shape"):
        measure.tinygemm_weights(p, s[:, :2], 64)
    assert measure.tinygemm_unavailable(torch.float16, "cpu") is not None  # bf16 activations only


def test_the_one_liner_scales_after_the_matmul_and_the_naive_form_before():
    """The seed's one-liner applies the row's scale to the product (once per output), the naive form to every weight
    before the matmul; on exactly representable inputs both give the exact product."""
    q = torch.tensor([[1, -2, 3, 4], [5, 6, -7, 8]], dtype=torch.int8)
    scale = torch.tensor([0.5, 0.25])
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]]).to(torch.bfloat16)
    want = (x.double() @ (q.double() * scale.double()[:, None]).T)
    assert torch.equal(measure.int8_one_liner(x, q, scale.to(torch.bfloat16)).double(), want)
    assert torch.equal(measure.naive_dequant_int8(x, q, scale).double(), want)
    assert measure.int8_one_liner(x, q, scale.to(torch.bfloat16)).dtype == torch.bfloat16
    assert measure.ONE_LINER_OPTIONS == {"coordinate_descent_tuning": True}


def test_the_one_liner_compile_option_is_its_own(monkeypatch):
    """coordinate_descent_tuning reaches Inductor as this compile's option (torch.compile(options=...)), not as a
    change to the process's config, which the rest of the lesson (and other lessons) compile with; one kernel per
    shape (dynamic=False)."""
    import torch._inductor.config as inductor_config

    seen = {}
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.update(fn=fn, **kw) or fn)
    before = inductor_config.coordinate_descent_tuning
    measure.compiled_int8_one_liner()
    assert inductor_config.coordinate_descent_tuning == before
    assert seen["fn"] is measure.int8_one_liner and seen["dynamic"] is False
    assert seen["options"] == {"coordinate_descent_tuning": True}
    assert "coordinate_descent_tuning" in inductor_config.get_config_copy()  # what torch.compile checks options against


# --- targets ------------------------------------------------------------------------------------------------------

def _row(shape, **us):
    return {"shape": list(shape), "us": {measure.BF16: 50.0, **us}}


def test_gemv_targets_hold_each_kernel_to_its_peer_and_not_to_bf16():
    res = {"rows": [_row((8, 8), **{measure.ONE_LINER: 33.0, measure.INT8_SOLUTION: 30.0, measure.INT8_LESSON: 31.0,
                                    measure.TINYGEMM: 23.0, measure.INT4_SOLUTION: 32.0, measure.INT4_LESSON: 20.0})],
           "notes": {}}
    t = {x["name"]: x for x in bench.gemv_targets(res)}
    assert len(t) == 4
    assert all("bf16" not in name and "3.2" not in name and "torchao" not in name for name in t)
    got = {name.split(", ")[1].split(" /")[0] + " / " + name.split(" / ")[1]:
           (round(x["value"], 3), x["goal"], x["met"]) for name, x in t.items()}
    assert got == {"workbook solution / int8 one-liner, compiled": (1.1, 0.97, True),
                   "lesson kernel / int8 one-liner, compiled": (round(33 / 31, 3), 0.97, True),
                   "lesson kernel / int4 tinygemm": (1.15, 1.05, True),
                   "workbook solution / int4 tinygemm": (round(23 / 32, 3), 0.8, False)}
    # a peer that could not run is a missed target that says why
    res["rows"][0]["us"].pop(measure.ONE_LINER)
    res["notes"] = {measure.ONE_LINER: "RuntimeError: inductor broke"}
    missed = [x for x in bench.gemv_targets(res) if "not measured" in x["name"]]
    assert len(missed) == 1 and "inductor broke" in missed[0]["name"] and not missed[0]["met"]


def test_the_old_impossible_targets_are_gone():
    """Issue 31: no "int8 >= 1.8x torchao" (two int8 GEMVs read the same bytes) and no "int4 >= 3.2x bf16" (a kernel at
    the read floor); the torchao run holds the int8 solution to tie the library, not to beat it by 1.8x."""
    res = {"rows": [_row((8, 8), **{measure.TORCHAO: 30.0, measure.INT8_SOLUTION: 28.0, measure.INT4_SOLUTION: 25.0})],
           "notes": {}}
    t = bench.torchao_targets(res)
    assert [(x["goal"], x["met"]) for x in t] == [(0.97, True)] and "torchao" in t[0]["name"]
    goals = {bench.ONE_LINER_TARGET, bench.TINYGEMM_TARGET_LESSON, bench.TINYGEMM_TARGET_SOLUTION,
             bench.TORCHAO_TARGET, bench.SWEEP_KEEP, bench.MLP_TARGET_TINYGEMM, bench.MLP_TARGET_INT8}
    assert 1.8 not in goals and 3.2 not in goals and 2.5 not in goals
    assert (bench.ONE_LINER_TARGET, bench.TINYGEMM_TARGET_LESSON, bench.TINYGEMM_TARGET_SOLUTION) == (0.97, 1.05, 0.8)


def test_mlp_and_sweep_targets():
    mlp = {"m": 1, "hidden": 1, "inter": 1, "us": {"bf16": 100.0, "int8": 55.0, "int4": 39.0, measure.TINYGEMM: 44.0}}
    assert [(round(x["value"], 3), x["met"]) for x in bench.mlp_targets(mlp)] == [(round(44 / 39, 3), True),
                                                                                (round(100 / 55, 3), True)]
    mlp["us"].pop(measure.TINYGEMM)
    mlp["notes"] = {measure.TINYGEMM: "tinygemm takes bf16 activations only, not float16"}
    first = bench.mlp_targets(mlp)[0]
    assert not first["met"] and "bf16 activations" in first["name"]
    sweep = {"dtype": "float16", "ms": [1, 4, 16],
             "us": {measure.BF16: [50.0, 50.0, 50.0], measure.INT8_LESSON: [28.0, 30.0, 30.0],
                    measure.INT4_LESSON: [20.0, 22.0, 30.0]}}
    t = bench.sweep_targets(sweep)
    assert [(round(x["value"], 3), x["met"]) for x in t] == [(round(28 / 30, 3), True), (round(20 / 30, 3), False)]
    assert all("/ at M=1" in x["name"] and "fp16" in x["name"] for x in t)
    assert bench.sweep_targets({"ms": [1, 2], "us": sweep["us"]}) == []  # no M = 16 in the run: nothing to hold


@pytest.mark.gpu
def test_gpu_large_shapes_and_peers():
    for n, k in ((4099, 4096), (1000, 14336)):
        x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda")
        q8, s8 = quant.quantize(w, 8, "channel")
        assert _ulps(kernels.w8a16_gemv(x, q8, s8), kernels.reference_gemv(x, quant.dequantize(q8, s8))) <= 1.0
        q4, s4 = quant.quantize(w, 4, "group", 128)
        y = kernels.w4a16_gemv(x, packing.pack_int4(q4), s4, 128)
        assert _ulps(y, kernels.reference_gemv(x, quant.dequantize(q4, s4, 128))) <= 1.0
    fn, why = measure.torchao_int8(torch.randn(256, 512, device="cuda").to(torch.bfloat16), compile=False)
    assert (fn is None) == (why is not None)


def test_recorded_tc_run_prints_the_committed_figures_and_backs_the_prose(capsys):
    """The going-further section's table: the tensor-core path's recorded H100 run (the curated file) beside the rows
    path and bf16, and the read floor. The prose reads from it: the tc path is the faster of the two where the rows
    path is slowest (4096 x 14336) and about even elsewhere, its error is the rows path's, and reading the int4 words
    alone allows a bit over 3.2x bf16, which no GEMV reaches."""
    from gpucourse.lessons.l07_quantization import recorded

    r = recorded.show_tc()
    out = capsys.readouterr().out
    assert "not measured here" in out and "H100" in out
    shapes = {s["shape"]: s for s in r["shapes"]}
    assert set(shapes) == {tuple(s) for s in measure.SHAPES}
    for s in shapes.values():
        assert f"{s['tc']:8.1f} µs {s['bf16'] / s['tc']:5.2f}x" in out and f"{s['rows']:8.1f} µs" in out
        assert 2.0 < s["bf16"] / s["tc"] < 2.5 and s["tc"] > r["read_only"]
    down = shapes[(4096, 14336)]
    assert down["tc"] < 0.9 * down["rows"]
    assert all(abs(s["tc"] / s["rows"] - 1) < 0.06 for k, s in shapes.items() if k != (4096, 14336))
    assert r["same_error_as_rows"] and len(r["checked_shapes"]) == 2
    floor = r["read_bf16"] / r["read_only"]
    assert 3.2 <= floor < 3.4 and r["read_bf16"] / r["read_fastest"] < 3.4
    assert f"= {floor:.2f}x" in out


def test_recorded_tile_major_run_prints_the_committed_figures_and_backs_the_prose(capsys):
    """The going-further section's tile-major table (the curated file): the prose says the layout is faster than the
    row layout on every shape, most on the widest matrix, still above the read floor; and the configuration the
    table labels as shipped is the one kernels.CONFIGS gives the tc path."""
    from gpucourse.lessons.l07_quantization import recorded

    r = recorded.show_tile_major()
    out = capsys.readouterr().out
    assert "not measured here" in out and "H100" in out
    shapes = {s["shape"]: s for s in r["shapes"]}
    assert set(shapes) == {tuple(s) for s in measure.SHAPES} | {(28672, 4096)}
    for s in shapes.values():
        assert f"{s['tiled']:8.1f} µs {s['bf16'] / s['tiled']:5.2f}x" in out
        assert s["tiled"] < s["rows_layout"] and s["worst_rel_diff"] < 4e-3
    gains = {k: s["rows_layout"] / s["tiled"] for k, s in shapes.items()}
    assert max(gains, key=gains.get) == (28672, 4096)
    assert shapes[(8192, 8192)]["tiled"] > recorded.tc_rounds()["read_only"]  # above the read floor
    c = kernels.CONFIGS["w4_tc"]
    assert r["shipped"] == {"TB": 128, "BLOCK_N": c["BLOCK_N"], "NSTAGE": c["NSTAGE"], "CTAS_PER_SM": c["CTAS_PER_SM"]}
    assert kernels.tile_major.__defaults__ == (128,)  # TB128: the block lesson_int4 lays the weights out in


def test_curated_recorded_file_is_what_promote_writes(tmp_path, monkeypatch):
    """The committed benchmarks/results/recorded/h100-l07_quantization.json holds exactly what the promote step
    makes of the lab's runs (written here into a scratch folder), and declares every key the lesson reads."""
    import json

    from gpucourse import recorded as curated
    from gpucourse.lessons.l07_quantization import recorded

    committed = curated.load(recorded.LESSON)
    monkeypatch.setattr(curated, "recorded_dir", lambda: str(tmp_path))
    with open(recorded.promote()) as f:
        fresh = json.load(f)
    assert fresh["values"] == json.loads(json.dumps(dict(committed)))
    assert fresh["keys"] == committed.keys_described == dict(sorted(recorded.KEYS.items()))
    assert fresh["environment"] == committed.environment and committed.environment["gpu"].startswith("NVIDIA H100")
    assert [s["file"] for s in committed.sources] == [recorded.TC_RUN, recorded.ACCESS_RUN, recorded.BATCH_RUN]
    with pytest.raises(KeyError, match="declares no key"):
        committed["rows BN4 BW256 w2"]  # a lab label is not a key


def test_lesson_int4_lays_each_weight_out_once_and_again_after_a_change(monkeypatch):
    """measure.lesson_int4 keeps a weight's tile-major copy (a model loader's work, done once), lays it out again when
    the weight is changed in place, and is w4a16_gemv as it is where the default path is not tc (fp16 x). In CPU
    mode the interpreter's tc path is switched on for the test (it is off by default there: slow)."""
    if not gpucourse.on_gpu():
        monkeypatch.setitem(kernels.CPU_CONFIGS, "w4_tc_max_m", 16)
    q = torch.randint(-8, 8, (40, 256), dtype=torch.int8, generator=torch.Generator().manual_seed(4))
    p, s = packing.pack_int4(q).to(DEV), (torch.rand(40, 2, generator=torch.Generator().manual_seed(5)) + 0.5).to(DEV)
    x = torch.randn(1, 256, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16).to(DEV)
    if kernels.w4a16_path(x, 128) != "tc":
        pytest.skip("no tc path on this GPU (not a Hopper GPU)")
    calls = []
    real = quant_linear.tile_major  # what Int4Linear.from_int4 lays the weight out with
    monkeypatch.setattr(quant_linear, "tile_major", lambda *a, **k: calls.append(a) or real(*a, **k))
    a = measure.lesson_int4(x, p, s, 128)
    b = measure.lesson_int4(x, p, s, 128)
    assert len(calls) == 1 and torch.equal(a, b)
    assert torch.equal(a, kernels.w4a16_gemv(x, p, s, 128, tc=True))  # the same kernel: only its addresses differ
    p[0, 0] ^= 0x11  # in place: the tile-major copy is stale
    c = measure.lesson_int4(x, p, s, 128)
    assert len(calls) == 2 and torch.equal(c, kernels.w4a16_gemv(x, p, s, 128, tc=True)) and not torch.equal(a, c)
    h = x.half()
    assert torch.equal(measure.lesson_int4(h, p, s, 128), kernels.w4a16_gemv(h, p, s, 128)) and len(calls) == 2


def test_lesson_int4_is_the_layer_lesson_11_runs():
    """measure.lesson_int4 and tinygemm_int4 time gpucourse.quant.Int4Linear built from the int4 weight
    (Int4Linear.from_int4): the same outputs as the layer quantized from the float weight, which refuses an int4
    weight it cannot read with a message."""
    w = torch.randn(32, 256, generator=torch.Generator().manual_seed(7)).to(DEV)
    x = torch.randn(1, 256, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16).to(DEV)
    layer = quant_linear.Int4Linear(w, group_size=128)
    assert torch.equal(measure.lesson_int4(x, layer.packed, layer.scales, 128), layer(x))
    if measure.tinygemm_unavailable(torch.bfloat16, DEV) is None:
        tg = quant_linear.Int4Linear(w, group_size=128, backend="tinygemm")
        assert torch.equal(measure.tinygemm_int4(x, tg.packed, tg.scales, 128), tg(x))
    with pytest.raises(ValueError, match="packed must be a 2-D uint8 tensor"):
        quant_linear.Int4Linear.from_int4(layer.packed.to(torch.int8), layer.scales, 128)
    with pytest.raises(ValueError, match=r"scales must be float32 of shape \(N, K // group_size\) = \(32, 2\)"):
        quant_linear.Int4Linear.from_int4(layer.packed, layer.scales[:, :1], 128)
    with pytest.raises(ValueError, match="K = 256 is not a multiple of group_size 96"):
        quant_linear.Int4Linear.from_int4(layer.packed, layer.scales, 96)


def test_w4a16_path_is_the_default_the_gemv_takes():
    """Section 4 prints which int4 path runs here: w4a16_path is what w4a16_gemv picks when not told."""
    cfg = kernels.configs()
    x1 = torch.zeros(1, 256, dtype=torch.bfloat16, device=DEV)
    want = "tc" if cfg["w4_tc_max_m"] >= 1 and kernels.tc_available(x1, 128) else "rows"
    assert kernels.w4a16_path(x1, 128) == want
    assert kernels.w4a16_path(x1, 32) == "rows"  # groups of 32: no tc path (a group's dots need K >= 16)
    assert kernels.w4a16_path(x1.half(), 128) == "rows"
    assert kernels.w4a16_path(torch.zeros(cfg["w4_rows_max_m"] + 1, 256, device=DEV), 128) == "dot"
    if not gpucourse.on_gpu():
        assert want == "rows"  # the interpreter runs the tc path only when asked (tc=True)


# --- the lesson's shape: one story, then "Going further" -------------------------------------------------------------

def _prose_words(nb: dict) -> tuple:
    """(words before the "Going further" section, whether that section exists and nothing but it follows)."""
    words, going_further = 0, None
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        headings = [line for line in text.splitlines() if line.startswith("#")]
        if headings and "Going further" in headings[0]:
            going_further = i
            break
        words += len(text.split())
    rest = nb["cells"][going_further + 1:] if going_further is not None else []
    later = ["".join(c["source"]) for c in rest if c["cell_type"] == "markdown"]
    only_going_further = going_further is not None and not any(
        line.startswith("## ") for text in later for line in text.splitlines())
    return words, only_going_further


def test_lesson_prose_is_at_most_2500_words_before_going_further(capsys):
    """The lesson tells one story in at most 2,500 words of prose. The rule: whitespace-split words of every markdown
    cell (code spans, links and headings included) before the first markdown cell whose first heading contains
    "Going further"; that section, the tensor-core path, must exist and be the last (no "## " heading after it)."""
    import json
    import os

    from gpucourse.workbooks import ROOT

    with open(os.path.join(ROOT, "notebooks", "07_quantization.ipynb"), encoding="utf-8") as f:
        nb = json.load(f)
    words, last = _prose_words(nb)
    with capsys.disabled():
        print(f"\nlesson 07: {words} words of prose before 'Going further'")
    assert last, "the notebook needs a final markdown section whose first heading contains 'Going further'"
    assert words <= 2500, f"{words} words of prose before 'Going further' (at most 2,500)"
    too_long = {"cells": nb["cells"] + [{"cell_type": "markdown", "source": ["## Going further\n"]}]}
    too_long["cells"][0] = {"cell_type": "markdown", "source": ["word " * 2501]}
    assert _prose_words(too_long)[0] > 2500  # the count sees a long cell before the section
