"""Lesson 08: the read counter, the online softmax, the attention kernels (in the interpreter in CPU mode) against
float64 attention, and the exercise checks on known submissions (in-process; tests/test_known_submissions.py grades
every one of them through the batch grader)."""
import math

import pytest
import torch

import gpucourse
from gpucourse.grading import checker
from gpucourse.lessons.l08_flash_attention import kernels, measure
from gpucourse.lessons.l08_flash_attention.exercises import flash_attention as fa_ex
from gpucourse.lessons.l08_flash_attention.readcount import Reader
from tests.submissions_util import right_submission

DEV = gpucourse.torch_device()


def _online():
    return right_submission("right_one_pass.py", "online_softmax")


def test_online_softmax_equals_softmax_and_reads_each_element_once():
    x = torch.randn(7, 101) * 30
    reader = Reader(x, block=16)
    out = _online()(reader.tensor, 16)
    assert reader.problems() == []
    assert torch.equal(reader.reads(), torch.ones(7, 101, dtype=torch.int64))
    reader.close()
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.allclose(out.double(), ref, rtol=1e-5, atol=1e-7)  # exact up to float32 rounding


def test_reader_counts_views_as_no_reads_and_flags_what_breaks_the_rule():
    x = torch.randn(3, 40)
    r = Reader(x, block=8)
    views = [r.tensor[:, :8], r.tensor.split(8, dim=1)[2], r.tensor.t()[:8], r.tensor[1]]
    assert r.ops == 0 and all(type(v).__name__ == "Counted" for v in views)
    blk = views[0].clone()
    blk.max(), blk.sum()  # work on the copy reads x no more
    assert int(r.reads()[:, :8].max()) == 1 and r.ops == 1
    views[0].sum()  # a second read of the same block
    assert any("read more than once" in p for p in r.problems())
    r.tensor.sum()  # whole rows at once
    assert any("read 40 columns of x at once; block=8" in p for p in r.problems())
    r.tensor[:, :2].add_(1)
    assert any(p.startswith("wrote into x") for p in r.problems())
    r.close()
    r2 = Reader(x, block=8)
    r2.tensor[:, :8].clone()
    assert any("never read" in p for p in r2.problems())
    r2.close()


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_kernel_equals_attention_on_ragged_s(d, causal):
    torch.manual_seed(d + causal)
    for s, dtype in ((1, torch.float16), (37, torch.float16), (50, torch.bfloat16)):
        q, k, v = (torch.randn(2, 2, s, d, dtype=dtype, device=DEV) for _ in range(3))
        o, lse = kernels.forward(q, k, v, causal)
        ref = kernels.reference(q, k, v, causal)
        tol = 4e-3 if dtype == torch.float16 else 3e-2
        assert float((o.double() - ref).abs().max()) <= tol * float(ref.abs().max()), (s, dtype)
        scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d)
        if causal:
            scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
        lse_ref = torch.logsumexp(scores, dim=-1).reshape(-1, s) / math.log(2)  # base 2, as the kernel keeps it
        assert torch.allclose(lse.double(), lse_ref, atol=2e-2), (s, dtype)


def test_backward_matches_autograd():
    for causal in (False, True):
        errs = measure.check_backward(s=29, d=64, causal=causal)
        assert max(errs.values()) < 3e-3, (causal, errs)


@pytest.mark.parametrize("blocks", [(16, 32), (32, 16)])
def test_backward_splits_masked_and_unmasked_blocks_at_any_s(blocks):
    # uneven query and key blocks: the diagonal, the blocks below it (no mask) and a ragged end all occur
    bm, bn = blocks
    for s, causal in ((29, True), (64, True), (80, False), (45, False)):
        g = torch.Generator().manual_seed(s)
        q, k, v, do = (torch.randn(1, 2, s, 64, generator=g).to(torch.float16).to(DEV) for _ in range(4))
        o, lse = kernels.forward(q, k, v, causal)
        got = kernels.backward(q, k, v, o, lse, do, causal,
                               blocks=dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=1))
        ref = [t.double().requires_grad_() for t in (q, k, v)]
        kernels.reference(*ref, causal).backward(do.double())
        for name, a, r in zip("qkv", got, ref):
            err = float((a.double() - r.grad).abs().max() / r.grad.abs().max())
            assert err < 3e-3, (blocks, s, causal, name, err)


@pytest.mark.parametrize("bm, bn", [(16, 48), (8, 16)])
def test_backward_refuses_blocks_that_are_not_powers_of_two_from_16(bm, bn):
    q = torch.randn(1, 1, 8, 64, dtype=torch.float16, device=DEV)
    o, lse = kernels.forward(q, q, q)
    with pytest.raises(ValueError, match=f"powers of two of at least 16, got {bm} and {bn}"):
        kernels.backward(q, q, q, o, lse, q, blocks=dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=1))


def test_causal_blocks_above_the_diagonal_are_not_needed():
    # the kernel never reads key blocks past a query block's diagonal: poisoning them changes nothing in the causal
    # output of the queries before them (key 64 on is past the diagonal of every query block of 16, 32 or 64 rows,
    # the blocks in CPU mode and for short S on a GPU; a poisoned key inside the diagonal block would be read, and
    # its v row's NaN would reach the output through p = 0 times NaN)
    q, k, v = (torch.randn(1, 1, 100, 64, dtype=torch.float16, device=DEV) for _ in range(3))
    o1, _ = kernels.forward(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 64:, :], v2[..., 64:, :] = float("nan"), float("nan")
    o2, _ = kernels.forward(q, k2, v2, causal=True)
    assert torch.equal(o1[..., :64, :], o2[..., :64, :])
    assert o2[..., 64:, :].isnan().all()  # and the later queries do read them


def test_attention_checks_its_arguments():
    q = torch.randn(1, 1, 8, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="head dimension"):
        kernels.forward(q, q, q)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        kernels.forward(q.float(), q.float(), q.float())


def test_score_bytes_and_flops():
    assert measure.score_bytes(1, 16, 16384) == 16 * 16384**2 * 2
    assert measure.flops(4, 16, 4096, 64, True) == measure.flops(4, 16, 4096, 64, False) / 2


def test_sdpa_backend_is_named():
    q = torch.randn(1, 2, 16, 64)
    assert measure.sdpa_backend(q, q, q) in ("FLASH_ATTENTION (CPU)", "MATH", "FLASH_ATTENTION",
                                             "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")


@pytest.mark.parametrize("name, message", [
    ("wrong_two_passes.py", "read more than once"),
    ("wrong_block_not_copied.py", "read more than once"),
    ("cheat_torch_softmax_whole_rows.py", "columns of x at once"),
    ("wrong_running_sum_not_rescaled.py", "too small by the same factor"),
    ("wrong_max_not_subtracted.py", "non-finite output"),
])
def test_online_softmax_check_rejects_each_wrong_submission(name, message):
    res = gpucourse.check("online_softmax", right_submission(name, "online_softmax"), quiet=True)
    assert res.status == "failed"
    assert any(message in p for c in res.cases for p in c.problems), res.report()


def test_online_softmax_check_passes_the_right_one():
    assert gpucourse.check("online_softmax", _online(), quiet=True).passed


def test_flash_attention_check_refuses_sdpa_and_bounds_memory():
    res = gpucourse.check("flash_attention", right_submission("cheat_sdpa_behind_dummy_kernel.py",
                                                              "flash_attention"), quiet=True)
    assert res.status == "failed" and all("calls aten._scaled_dot_product" in c.problems[0] for c in res.cases)
    q = torch.empty(1, 2, 384, 64, dtype=torch.float16)
    limit = fa_ex.max_extra_bytes(q, q, q)
    args = [{"value": q}, {"value": q}, {"value": q}]
    ok = checker.memory_problem(fa_ex.EXERCISE, args, [{"extra_bytes": limit}, {"extra_bytes": 10 * limit}])
    bad = checker.memory_problem(fa_ex.EXERCISE, args, [{"extra_bytes": limit + 1}, {"extra_bytes": 2 * limit}])
    assert ok == [] and "beyond its inputs during the call" in bad[0]


def test_online_softmax_combines_per_block_statistics_freely_but_not_kept_elements():
    """Per-block maxima and sums stacked and reduced at the end are statistics (allowed); a reduction over the kept
    elements of several blocks is a second pass on copies (issue 39)."""
    from gpucourse.lessons.l08_flash_attention.exercises import online_softmax as ex

    def stats_at_the_end(x, block):
        blocks = [x[:, j:j + block].to(torch.float32, copy=True) for j in range(0, x.shape[1], block)]
        ms = torch.stack([b.amax(dim=1) for b in blocks], dim=1)  # one maximum per block: statistics
        m = ms.amax(dim=1)
        es = [torch.exp(b - m[:, None]) for b in blocks]
        s = torch.stack([e.sum(dim=1) for e in es], dim=1).sum(dim=1)
        return torch.cat([e / s[:, None] for e in es], dim=1).to(x.dtype)

    def sum_over_kept(x, block):
        blocks = [x[:, j:j + block].to(torch.float32, copy=True) for j in range(0, x.shape[1], block)]
        m = torch.stack([b.amax(dim=1) for b in blocks], dim=1).amax(dim=1)
        e = torch.exp(torch.cat(blocks, dim=1) - m[:, None])
        return (e / e.sum(dim=1, keepdim=True)).to(x.dtype)

    params = dict(ex.EXERCISE.cases[0].params)  # 4x64, block 16
    assert ex.judge(stats_at_the_end, params, seed=3) == []
    (problem,) = ex.judge(sum_over_kept, params, seed=3)
    assert problem.startswith("aten.sum combined 64 elements computed from x along one dimension; block=16")


# ---------------------------------------------------------------------------------------------------------------------
# The tile model the lesson prints, and the measurement logic that runs on the CPU (issue 31).


@pytest.mark.parametrize("causal", [False, True])
def test_tile_model_is_the_kernels_algorithm(causal):
    """The torch tile model gives the float64 answer and the kernel's base-2 log-sum-exp, for ragged S and blocks
    that do not divide it; a missing rescale (alpha forced to 1) would move whole rows."""
    torch.manual_seed(7 + causal)
    for s, d, dtype, bm, bn in ((1, 64, torch.float16, 16, 16), (37, 64, torch.float16, 16, 8),
                                (70, 128, torch.bfloat16, 32, 16)):
        q, k, v = (torch.randn(2, 2, s, d, dtype=dtype, device=DEV) * 3 for _ in range(3))
        o, lse = kernels.tile_model(q, k, v, causal, block_m=bm, block_n=bn)
        ref = kernels.reference(q, k, v, causal)
        tol = 4e-3 if dtype == torch.float16 else 3e-2
        assert o.dtype == q.dtype and o.shape == q.shape
        assert float((o.double() - ref).abs().max()) <= tol * float(ref.abs().max()), (s, dtype)
        _, lse_kernel = kernels.forward(q, k, v, causal)
        assert torch.allclose(lse, lse_kernel, atol=2e-2), (s, dtype)


def test_tile_model_refuses_empty_blocks():
    q = torch.randn(1, 1, 8, 64)
    with pytest.raises(ValueError, match="block sizes must be positive"):
        kernels.tile_model(q, q, q, block_m=0)


def test_spread_and_noise():
    assert measure.spread([2.0]) == 0.0
    assert measure.spread([1.0, 1.1, 0.9]) == pytest.approx(0.2)
    rows = [{"s": 1024, "d": 64, "causal": False, "b": 16, "spread": {"a": 0.01, "b": 0.03}},
            {"s": 4096, "d": 128, "causal": True, "b": 4, "spread": {"a": 0.12, "b": 0.02}}]
    n = measure.noise(rows)
    assert n["max"] == 0.12 and n["n"] == 4 and n["median"] == pytest.approx(0.025)
    assert n["where"] == {"s": 4096, "d": 128, "causal": True, "b": 4, "name": "a"}
    point = {"shape": {"b": 4, "h": 16, "s": 4096, "d": 64, "causal": False}, "spread": {"x": 0.05}}
    assert measure.noise([point])["where"]["s"] == 4096 and measure.noise([])["n"] == 0


def test_refusal_keeps_the_reason_and_drops_the_noise():
    exc = RuntimeError("No available kernel. Aborting execution.\nsecond line")
    msgs = ["Flash attention kernel not used because: (Triggered internally at /x/sdp_utils.cpp:988.)",
            "cuDNN attention has been runtime disabled. (Triggered internally at /x.cpp:706.)",
            "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float "
            "(Triggered internally at /x/sdp_utils_cpp.h:91.)"] * 2
    line = measure.refusal(exc, msgs)
    assert line == ("RuntimeError: No available kernel. Aborting execution. -- Expected query, key and value to all "
                    "be of dtype: {Half, BFloat16}. Got Query dtype: float")
    assert measure.refusal(ValueError("")) == "ValueError"

    def refuses():
        import warnings
        warnings.warn("head_dim should be a multiple of 8")
        raise RuntimeError("No available kernel.")
    out, why = measure.attempt(refuses)
    assert out is None and why == "RuntimeError: No available kernel. -- head_dim should be a multiple of 8"
    assert measure.attempt(lambda x: x + 1, 1) == (2, None)


def test_count_instructions_tells_wgmma_from_mma_sync():
    ptx = ("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {...};\n wgmma.fence.sync.aligned;\n"
           "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {...};\n cp.async.cg.shared.global [a], [b], 16;\n"
           "cp.async.commit_group;\n cp.async.bulk.tensor.2d.shared::cluster.global [c], [d];\n")
    assert measure.count_instructions(ptx) == {"wgmma.mma_async": 1, "mma.sync": 1, "cp.async": 2,
                                               "cp.async.bulk (TMA)": 1}


def test_calls_in_code_reads_inductors_output():
    code = ("@triton.jit\ndef triton_per_fused__softmax_tanh_0(in_ptr0, out_ptr0):\n    pass\n"
            "def call(args):\n    extern_kernels.bmm(a, b, out=buf0)\n"
            "    buf1 = torch.ops.aten._scaled_dot_product_cudnn_attention.default(q, k, v)\n"
            "    buf2 = torch.ops.aten.view.default(buf1, [1])\n")
    assert measure.calls_in_code(code) == ["_scaled_dot_product_cudnn_attention", "extern_kernels.bmm",
                                           "triton_per_fused__softmax_tanh_0"]


def test_implementations_name_every_peer_and_drop_what_does_not_fit():
    short = measure.implementations(1024, b=16, h=16)
    assert list(short) == [measure.OURS, measure.WORKBOOK, measure.FLEX, "SDPA FLASH_ATTENTION",
                           "SDPA CUDNN_ATTENTION", "SDPA EFFICIENT_ATTENTION", "SDPA MATH", "naive"]
    long = measure.implementations(16384, b=1, h=16)  # fp16 scores 8.6 GB, fp32 17 GB: neither fits
    assert "SDPA MATH" not in long and "naive" not in long and measure.FLEX in long
    mem = measure.implementations(16384, naive_limit_bytes=20e9, b=1, h=16, auto=True, peers=False)
    assert list(mem) == [measure.OURS, "SDPA (its choice)", "SDPA FLASH_ATTENTION", "SDPA CUDNN_ATTENTION",
                         "SDPA EFFICIENT_ATTENTION", "naive"]


def _row(d, causal, s=4096, b=4, ours=1.0, cudnn=0.8, naive=6.0):
    ms = {measure.OURS: ours, "SDPA FLASH_ATTENTION": 1.4 * ours, "SDPA CUDNN_ATTENTION": cudnn, "naive": naive}
    return {"s": s, "d": d, "b": b, "h": 16, "causal": causal, "ms": ms, "tflops": {}, "spread": {}}


def test_forward_targets_are_read_off_the_sweep_at_the_bench_point():
    from gpucourse.lessons.l08_flash_attention import bench

    rows = [_row(d, c, s=s, b=16384 // s) for d in (64, 128) for c in (False, True) for s in (1024, 4096, 16384)]
    rows[1]["ms"]["SDPA CUDNN_ATTENTION"] = 0.6  # D64 at S 4096: ours at 0.6x cuDNN
    doc = bench.forward_from_sweep(rows)
    assert list(doc["points"]) == ["D64", "D64 causal", "D128", "D128 causal"]
    assert all(p["s"] == 4096 and p["b"] == 4 and p["shape"]["s"] == 4096 for p in doc["points"].values())
    targets = {t["name"]: t for t in bench.forward_targets(doc)}
    assert not any("FLASH_ATTENTION" in n for n in targets)  # FA2 is reported, never a target
    t = targets["forward D64: ours / SDPA CUDNN_ATTENTION (speed)"]
    assert t["value"] == pytest.approx(0.6) and t["goal"] == bench.FORWARD_VS_CUDNN[64] == 1.0 and not t["met"]
    t = targets["forward D128 causal: ours / SDPA CUDNN_ATTENTION (speed)"]
    assert t["value"] == pytest.approx(0.8) and t["goal"] == bench.FORWARD_VS_CUDNN[128] == 0.95 and not t["met"]
    assert targets["forward D128: ours / naive attention (speed)"]["value"] == pytest.approx(6.0)
    with pytest.raises(ValueError, match="D128 causal"):
        bench.forward_from_sweep(rows[:-3])


def test_backward_targets_compare_with_cudnn():
    from gpucourse.lessons.l08_flash_attention import bench

    p = {"bwd_ms": {measure.OURS: 2.0, "SDPA FLASH_ATTENTION": 2.1, "SDPA CUDNN_ATTENTION": 1.0}}
    (t,) = bench.backward_targets({"points": {"D64": p}})
    assert t["name"] == "backward D64: ours / SDPA CUDNN_ATTENTION (speed)" and t["value"] == 0.5 and not t["met"]
    assert bench.BACKWARD_VS_CUDNN < 1 and set(bench.FORWARD_VS_CUDNN) == set(kernels.HEAD_DIMS)


def test_exercise_speed_target_is_stated_and_measured_against_sdpas_choice():
    assert fa_ex.EXERCISE.perf.target == 0.7 and fa_ex.EXERCISE.perf.baseline == "reference"
    assert "target is 0.7x its speed" in fa_ex.STATEMENT and "left to choose its backend" in fa_ex.STATEMENT


def test_the_lesson_does_not_print_the_exercises_kernel():
    """The workbook asks for the forward kernel: the lesson teaches its algorithm (the tile model) and does not
    print the kernel's source (the expert review, section 5)."""
    import json
    import os

    nb = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "notebooks", "08_flash_attention.ipynb")))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    code = ["".join(c["source"]) for c in cells]
    printed = ["".join("".join(o.get("text", "")) for o in c.get("outputs", [])) for c in cells]
    assert any("kernels.tile_model" in c for c in code)
    for c in code:
        assert "kernels.source(" not in c and "getsource(kernels.attn_fwd_kernel" not in c, c
    for text in printed:
        assert "def attn_fwd_kernel" not in text and "def _fwd_blocks" not in text
