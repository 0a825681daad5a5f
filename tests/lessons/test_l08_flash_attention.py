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


def test_causal_blocks_above_the_diagonal_are_not_needed():
    # the kernel never reads keys after the query: poisoning them changes nothing in the causal output
    q, k, v = (torch.randn(1, 1, 40, 64, dtype=torch.float16, device=DEV) for _ in range(3))
    o1, _ = kernels.forward(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 32:, :], v2[..., 32:, :] = float("nan"), float("nan")
    o2, _ = kernels.forward(q, k2, v2, causal=True)
    assert torch.equal(o1[..., :32, :], o2[..., :32, :])


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
