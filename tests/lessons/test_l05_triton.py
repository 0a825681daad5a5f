"""Lesson 05's exercises: the reference solutions loaded from the solved workbook pass `gpucourse.check` (the
workbook is the single source of those kernels; the benchmarks load them the same way), and the lesson's Hopper
kernel. The known softmax/matmul submissions' verdicts are tests/test_known_submissions.py's."""
from __future__ import annotations

import pytest

import gpucourse
from gpucourse.solutions import cached_solutions, load_solutions, solution_source


def test_reference_solutions_from_the_workbook_pass_check():
    ns = load_solutions("05_triton")
    for exercise in ("vector_add", "softmax", "matmul"):
        result = gpucourse.check(exercise, ns[exercise], quiet=True)
        assert result.passed, result.report()


def test_solution_source_is_only_imports_and_solution_cells():
    src = solution_source("05_triton")
    assert "gpucourse.check(" not in src and "### BEGIN SOLUTION" in src
    assert "import triton" in src  # import-only cells come along, the setup and check cells do not


def test_softmax_rows_too_small_by_one_factor_get_the_padding_hint_not_float32():
    """compare names the padding bug (rows each scaled by one factor < 1: a sum too large) and keeps the fp16 hint
    for errors that vary element by element; the known submission softmax/wrong_padding_loaded_as_zero.py is graded
    in tests/test_known_submissions.py."""
    import torch

    from gpucourse.grading import compare

    gen = torch.Generator().manual_seed(0)
    e = torch.softmax(torch.randn(3, 1023, generator=gen, dtype=torch.float64), dim=-1).float()
    padded = e * torch.tensor([[0.9994], [0.9995], [0.9993]])  # one extra exp(0 - max) in each row's sum
    m = compare.compare_values(e, padded, rtol=1e-5, atol_scale=1e-6)
    assert not m.ok and m.problems[0].startswith("every element of each wrong row is too small by the same factor")
    assert "masked-off lanes must load -inf" in m.problems[0] and not m.hints, m.text()
    fp16 = e.half().float()  # rounding: errors differ element by element
    m = compare.compare_values(e, fp16, rtol=1e-5, atol_scale=1e-6)
    assert not m.ok and not any("same factor" in p for p in m.problems)
    assert any("compute in float32" in h for h in m.hints), m.text()
    m = compare.compare_values(e * 2, padded * 2, rtol=1e-5, atol_scale=1e-6)  # rows not summing to 1: no claim
    assert not m.ok and not any("same factor" in p for p in m.problems)


# --- the lesson's Hopper kernel (gpucourse.lessons.l05_triton.hopper_matmul): the interpreter in CPU mode, the real thing on sm90+ ---

def _hopper_ok():
    from gpucourse.lessons.l05_triton import hopper_matmul

    return hopper_matmul.unsupported(torch_zeros(8, 8)) is None


def torch_zeros(*shape, dtype=None):
    import torch

    return torch.zeros(*shape, dtype=dtype or torch.float16, device=gpucourse.torch_device())


@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (70, 96, 40), (33, 8, 16), (130, 264, 72)])
@pytest.mark.parametrize("epilogue", ["none", "bias", "silu"])
def test_hopper_matmul_matches_torch_on_ragged_shapes(m, n, k, epilogue):
    import torch
    import torch.nn.functional as F
    from gpucourse.lessons.l05_triton import hopper_matmul

    if not _hopper_ok():
        pytest.skip(hopper_matmul.unsupported(torch_zeros(8, 8)))
    dev = gpucourse.torch_device()
    gen = torch.Generator().manual_seed(m * 1000 + n + k)
    for dtype in (torch.float16, torch.bfloat16):
        a = torch.randn(m, k, generator=gen).to(dtype).to(dev)
        b = torch.randn(k, n, generator=gen).to(dtype).to(dev)
        bias = torch.randn(n, generator=gen).to(dtype).to(dev)
        want = a.double() @ b.double()
        if epilogue == "none":
            got = hopper_matmul.matmul(a, b)
        else:
            want = want + bias.double()
            if epilogue == "silu":
                want = F.silu(want)
            got = hopper_matmul.matmul(a, b, bias, "silu" if epilogue == "silu" else "none")
        assert got.dtype == dtype and got.shape == (m, n)
        err = (got.double() - want).abs().max().item()
        assert err <= 2e-2 * want.abs().max().item() + 1e-2, (dtype, err)


def test_hopper_matmul_empty_sizes_and_clear_errors():
    import torch
    import torch.nn.functional as F
    from gpucourse.lessons.l05_triton import hopper_matmul

    bias = torch.ones(8, dtype=torch.float16, device=gpucourse.torch_device())
    out = hopper_matmul.matmul(torch_zeros(3, 0), torch_zeros(0, 8), bias, "silu")  # an empty sum, then the epilogue
    torch.testing.assert_close(out, F.silu(torch.ones(3, 8, device=out.device)).half())
    assert hopper_matmul.matmul(torch_zeros(0, 8), torch_zeros(8, 8)).shape == (0, 8)
    with pytest.raises(ValueError, match="do not fit"):
        hopper_matmul.matmul(torch_zeros(4, 8), torch_zeros(7, 8))
    with pytest.raises(ValueError, match="pass bias"):
        hopper_matmul.matmul(torch_zeros(4, 8), torch_zeros(8, 8), None, "silu")
    with pytest.raises(ValueError, match="activation must be one of"):
        hopper_matmul.matmul(torch_zeros(4, 8), torch_zeros(8, 8), bias, "gelu")
    with pytest.raises(ValueError, match="bias must be 1-D with 8"):
        hopper_matmul.matmul(torch_zeros(4, 8), torch_zeros(8, 8), torch_zeros(4))
    if not _hopper_ok():
        pytest.skip(hopper_matmul.unsupported(torch_zeros(8, 8)))
    with pytest.raises(RuntimeError, match="16-byte boundaries"):
        hopper_matmul.matmul(torch_zeros(4, 6), torch_zeros(6, 8))
    with pytest.raises(RuntimeError, match="contiguous row-major"):
        hopper_matmul.matmul(torch_zeros(4, 8), torch_zeros(8, 8).t())
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        hopper_matmul.matmul(torch_zeros(4, 8, dtype=torch.float32), torch_zeros(8, 8, dtype=torch.float32))


@pytest.mark.gpu
def test_hopper_matmul_on_the_gpu_says_why_it_cannot_run_or_matches_cublas():
    import torch
    from gpucourse.lessons.l05_triton import hopper_matmul

    a = torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1048, device="cuda", dtype=torch.bfloat16)
    major, _ = torch.cuda.get_device_capability()
    reason = hopper_matmul.unsupported(a, b)
    if major < 9:
        assert reason and "compute capability 9.0" in reason
        with pytest.raises(RuntimeError, match="cannot run here"):
            hopper_matmul.matmul(a, b)
        return
    assert reason is None
    torch.testing.assert_close(hopper_matmul.matmul(a, b), a @ b, rtol=2e-2, atol=0.5)


def test_hopper_matmul_rejects_a_misaligned_view_and_mixed_devices():
    import torch
    from gpucourse.lessons.l05_triton import hopper_matmul

    if not _hopper_ok():
        pytest.skip(hopper_matmul.unsupported(torch_zeros(8, 8)))
    base = torch_zeros(4, 17)
    view = base[:, 1:9]  # 8 columns, but rows that start 2 bytes past a boundary (and a row stride of 17)
    assert "contiguous row-major" in hopper_matmul.unsupported(view)
    flat = torch_zeros(4 * 8 + 1)[1:].view(4, 8)  # contiguous, rows of 16 bytes, start 2 bytes off
    assert "16-byte boundary" in hopper_matmul.unsupported(flat)
    with pytest.raises(ValueError, match="one device"):
        hopper_matmul.matmul(torch_zeros(4, 8), torch_zeros(8, 8), torch.zeros(8, dtype=torch.float16, device="meta"))


# --- one contract for the workbook's matmul and the Hopper kernel: bias, activation, and what is refused ---

def _matmuls() -> dict:
    from gpucourse.lessons.l05_triton import hopper_matmul

    kernels = {"workbook": cached_solutions("05_triton")["matmul"]}
    if _hopper_ok():
        kernels["hopper"] = hopper_matmul.matmul
    return kernels


@pytest.mark.parametrize("kernel", ["workbook", "hopper"])
def test_matmul_bias_and_activation_do_what_they_say(kernel):
    """A bias with activation "none" is added (it was silently ignored by the workbook's wrapper), "silu" applies
    SiLU to a @ b + bias, and what neither can honour raises instead of returning plain a @ b."""
    import torch
    import torch.nn.functional as F

    matmul = _matmuls().get(kernel)
    if matmul is None:
        pytest.skip(f"no {kernel} kernel here")
    dev = gpucourse.torch_device()
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(40, 24, generator=gen).half().to(dev)
    b = torch.randn(24, 32, generator=gen).half().to(dev)
    bias = torch.randn(32, generator=gen).half().to(dev)
    exact = a.double() @ b.double()
    for args, want in [((), exact), ((None,), exact), ((bias,), exact + bias.double()),
                       ((bias, "none"), exact + bias.double()), ((bias, "silu"), F.silu(exact + bias.double()))]:
        got = matmul(a, b, *args).double()
        assert (got - want).abs().max().item() <= 2e-2 * want.abs().max().item() + 1e-2, args
    with pytest.raises(ValueError, match="pass bias"):
        matmul(a, b, None, "silu")
    with pytest.raises(ValueError, match="activation must be one of"):
        matmul(a, b, bias, "gelu")
    with pytest.raises(ValueError, match="activation must be one of"):
        matmul(a, b, None, "gelu")


def test_bench_suites_share_one_cached_load_of_each_workbook():
    from gpucourse.lessons.l03_memory_hierarchy import measure as memory03
    from gpucourse.lessons.l04_cuda_reduction import measure as cuda04
    from gpucourse.lessons.l05_triton import bench as triton05

    assert triton05.solutions() is cached_solutions("05_triton") is triton05.solutions()
    assert memory03.solutions() is cached_solutions("03_memory_hierarchy")
    assert cuda04.solutions() is cached_solutions("04_cuda_reduction")


class _FakeCudaMatrix:
    """What hopper_matmul.unsupported reads of a tensor: a contiguous, aligned float16 4x8 matrix on ``device``."""

    def __init__(self, device):
        import torch

        self.device, self.dtype, self.shape = torch.device(device), torch.float16, (4, 8)

    def dim(self):
        return 2

    def stride(self, dim):
        return (8, 1)[dim]

    def element_size(self):
        return 2

    def data_ptr(self):
        return 0


def test_hopper_unsupported_checks_the_tensors_device_not_the_current_one(monkeypatch):
    """In GPU mode (faked here): tensors left on the CPU get a plain reason, not an obscure Triton error, and the
    compute capability asked about is that of the GPU holding ``a``."""
    import torch
    from gpucourse.lessons.l05_triton import hopper_matmul

    if not hasattr(hopper_matmul.tl, "make_tensor_descriptor"):
        pytest.skip(hopper_matmul.unsupported(torch_zeros(8, 8)))
    monkeypatch.setattr(hopper_matmul, "INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    asked = []

    def capability(device=None):
        asked.append(device)
        return (9, 0) if device == torch.device("cuda", 1) else (8, 0)  # cuda:1 a Hopper, the current one not

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    cpu = torch.zeros(4, 8, dtype=torch.float16)
    assert "a is on cpu" in hopper_matmul.unsupported(cpu, cpu)
    assert "b is on cpu" in hopper_matmul.unsupported(_FakeCudaMatrix("cuda:1"), cpu)
    assert hopper_matmul.unsupported(_FakeCudaMatrix("cuda:1"), _FakeCudaMatrix("cuda:1")) is None
    assert asked[-1] == torch.device("cuda", 1)
    assert "compute capability 9.0" in hopper_matmul.unsupported(_FakeCudaMatrix("cuda:0"))


def test_hopper_scratch_memory_goes_on_the_given_device():
    import torch
    from gpucourse.lessons.l05_triton import hopper_matmul

    scratch = hopper_matmul.scratch_allocator(torch.device("cpu"))(128, 16, None)
    assert scratch.device == torch.device("cpu") and scratch.numel() == 128 and scratch.dtype == torch.int8


# --- the reference solutions off the benchmark shape (issue #18 §4): every path of the softmax, the matmul's configs

@pytest.mark.parametrize("rows,cols,dtype,layout", [
    (37, 100, "float32", "contiguous"),       # narrow: several rows per program; 100 = 4 x 25, a 16-byte hint
    (5, 128, "bfloat16", "contiguous"),       # narrow rows, fewer rows than one program takes
    (9, 1000, "float16", "every other row"),  # width 1000: the 16-byte hint with strided rows
    (3, 999, "float16", "contiguous"),        # no hint possible
    (2, 20000, "float32", "column slice"),    # wider than 16384: the split path, strided rows
    (1, 40000, "float16", "contiguous"),      # one huge row
    (4, 5000, "float32", "contiguous"),       # the exercise's one-row kernel
])
def test_reference_softmax_every_path_matches_torch(rows, cols, dtype, layout):
    import torch

    softmax = cached_solutions("05_triton")["softmax"]
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(rows * cols)
    full = torch.randn(rows * 2, cols + 24, generator=gen) * 4
    x = {"contiguous": full[:rows, :cols], "every other row": full[::2, :cols],
         "column slice": full[:rows, :cols]}[layout]
    if layout == "contiguous":
        x = x.contiguous()
    x = x.to(dt).to(gpucourse.torch_device())
    want = torch.softmax(x.double(), dim=-1)
    got = softmax(x)
    assert got.dtype == dt and got.shape == x.shape
    tol = dict(rtol=1e-5, atol=1e-7) if dt == torch.float32 else dict(rtol=1e-2, atol=1e-4)
    torch.testing.assert_close(got.double(), want, **tol)


def test_softmax_vector_width_is_only_claimed_where_it_holds():
    import torch

    ns = cached_solutions("05_triton")
    width = ns["vector_width"]
    h = torch.zeros(4, 1000, dtype=torch.float16)
    assert width(h, torch.empty_like(h), 1000) == 8           # 1000 = 8 x 125: rows start on 16-byte boundaries
    assert width(h[:, :999], torch.empty(4, 999, dtype=torch.float16), 999) == 1
    big = torch.zeros(4, 1004, dtype=torch.float16)
    assert width(big[:, :1000], torch.empty(4, 1000, dtype=torch.float16), 1000) == 4  # row stride 1004 = 4 x 251
    assert width(h.t(), torch.empty(1000, 4, dtype=torch.float16), 4) == 1             # columns not contiguous
    assert width(torch.zeros(3, 100), torch.empty(3, 100), 100) == 4                   # fp32: 4 per 16 bytes


def test_matmul_configs_are_chosen_by_shape(monkeypatch):
    ns = cached_solutions("05_triton")
    from gpucourse.lessons.l05_triton import tuning

    assert ns["matmul_kernel"] is not None and ns["row_alignment"] is tuning.row_alignment  # the workbook uses them
    pick, row_alignment = tuning.prune_by_shape, tuning.row_alignment
    if ns["INTERPRETED"]:
        configs = tuning.matmul_configs()
        assert len(configs) == 1 and pick(configs, {"M": 16, "N": 8192}) == configs  # nothing to choose
    # the GPU's choice, as on an H100 (132 SMs): a few rows, too few big tiles, large
    monkeypatch.setattr(tuning, "interpreted", lambda: False)
    monkeypatch.setattr(tuning, "_sm_count", lambda: 132)
    configs = tuning.matmul_configs()

    def shapes(m, n):
        return {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in pick(configs, {"M": m, "N": n})}

    assert all(bm <= 32 for bm, _ in shapes(16, 8192))
    assert shapes(1000, 1000) == {(64, 64), (64, 128), (128, 64), (128, 128)}
    assert (128, 256) in shapes(8192, 8192) and all(bm >= 64 for bm, _ in shapes(8192, 8192))
    monkeypatch.setattr(tuning, "_sm_count", lambda: None)  # no GPU: every config is kept
    assert pick(configs, {"M": 16, "N": 8192}) == configs
    import torch

    def args(m, n, k, dtype=torch.bfloat16, b_t=False):
        a = torch.zeros(m, k, dtype=dtype)
        b = torch.zeros(n, k, dtype=dtype).t() if b_t else torch.zeros(k, n, dtype=dtype)
        return {"a_ptr": a, "stride_am": a.stride(0), "stride_bk": b.stride(0)}

    assert row_alignment(args(1000, 1000, 1000)) == 8
    assert row_alignment(args(500, 500, 500)) == 4
    assert row_alignment(args(33, 33, 33)) == 1
    assert row_alignment(args(64, 64, 64, b_t=True)) == 1  # b transposed: its k stride is 1, no row hint
    assert row_alignment(args(64, 64, 64, dtype=torch.float32)) == 4


def test_the_lesson_registers_its_off_shape_and_fused_epilogue_benchmarks():
    from gpucourse import benchmarks

    reg = benchmarks.registry()
    for name in ("triton05_offshape", "triton05_fused_epilogue", "triton05_matmul", "triton05_softmax"):
        assert reg[name]["lesson"] == "05"
    from gpucourse.lessons.l05_triton import bench

    assert bench.SOFTMAX_SHAPES == [(65536, 128, "bfloat16"), (32768, 1000, "float16"), (1, 100000, "float32")]
    assert bench.MATMUL_SHAPES == [(1000, 1000, 1000), (16, 8192, 8192)]


def test_fused_epilogue_rounds_rotate_the_order_and_keep_every_round():
    """The fused-epilogue benchmark (review N1) times every contender once per round, each round in a different
    order, and reports each contender's rounds (median and spread come from them)."""
    from types import SimpleNamespace

    from gpucourse.lessons.l05_triton import bench

    calls = []

    def timer(fn, name, **kw):
        calls.append(name)
        return SimpleNamespace(median_ms=float(len(calls)))

    fns = {"a": None, "b": None, "c": None}
    r = bench.rotated_rounds(fns, 3, timer=timer)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert r["a"].medians_ms == [1.0, 6.0, 8.0] and r["a"].median_ms == 6.0
    firsts = [calls[i] for i in (0, 3, 6)]
    assert sorted(firsts) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        bench.rotated_rounds(fns, 0, timer=timer)
    assert bench.ROUNDS >= 3


def test_kernel_names_are_shortened_to_what_the_prose_can_quote():
    from gpucourse.lessons.l05_triton.bench import _short_kernel_name

    assert _short_kernel_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                              "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
                              ) == "at::native::cunn_SoftMaxForward"
    assert _short_kernel_name("triton_per_fused__softmax_0") == "triton_per_fused__softmax_0"


def test_small_gemms_are_issue_33s_shapes_and_printed_with_their_targets():
    from gpucourse import benchmarks
    from gpucourse.lessons.l05_triton import bench

    assert benchmarks.registry()["triton05_small_gemms"]["lesson"] == "05"
    assert bench.SMALL_GEMMS == [((1000, 1000, 1000), 0.85), ((3000, 5000, 2000), 0.85), ((2048, 2048, 8192), 0.85),
                                 ((16, 8192, 8192), 0.85), ((4096, 4096, 4096), 0.95)]
    result = {"shapes": {"1000x1000x1000": {"graph_us": {"workbook": 13.2, "cuBLAS": 8.7, "hopper": 13.0},
                                            "best": "hopper", "vs_cuBLAS": 8.7 / 13.0, "goal": 0.85}},
              "targets": [benchmarks.target("matmul bf16 1000x1000x1000 / cuBLAS", 8.7 / 13.0, 0.85)]}
    lines = bench.small_gemm_lines(result)
    assert lines[0] == ("1000x1000x1000   workbook    13.2 µs, cuBLAS     8.7 µs, hopper    13.0 µs -> hopper 0.67x "
                        "cuBLAS (goal 0.85)")
    assert lines[1] == "  [MISSED] matmul bf16 1000x1000x1000 / cuBLAS: 0.669 (target >= 0.85)"
