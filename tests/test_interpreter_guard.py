"""gpucourse/grading/interpreter.py: in CPU mode a Triton kernel's body is held to what a GPU would compile (no torch,
no NumPy), and bf16 arithmetic in Triton's interpreter is computed as on a GPU (issue 39)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import gpucourse
from gpucourse.grading import interpreter, launches
from gpucourse.grading.checker import check

import triton
import triton.language as tl

pytestmark = pytest.mark.skipif(gpucourse.on_gpu() or not interpreter.active(),
                                reason="Triton's interpreter runs in CPU mode only")

RULE = "may only use Triton (tl.*) operations, not torch or NumPy (on a GPU this kernel would not compile)"


@pytest.fixture(autouse=True)
def _installed():
    assert launches.install() and interpreter.install()


def _raises(launch) -> str:
    with pytest.raises(Exception) as info:
        launch()
    return str(info.value)


# ---------------------------------------------------------------------------------------------------------------------
# torch and NumPy inside a kernel body.


@triton.jit
def _matmul_by_methods(x: tl.constexpr, w: tl.constexpr, out: tl.constexpr):
    out.copy_(x.float() @ w.float())


def test_tensor_methods_in_a_body_are_stopped_as_they_run():
    x, w, out = torch.randn(4, 8), torch.randn(8, 3), torch.zeros(4, 3)
    message = _raises(lambda: _matmul_by_methods[(1,)](x, w, out))
    assert RULE in message and "the Triton kernel `_matmul_by_methods` calls Tensor.float" in message
    assert "the call was stopped here" in message and "line" in message
    assert torch.count_nonzero(out) == 0  # nothing was computed


_mm = torch.matmul  # an alias: no `torch.` in the kernel


@triton.jit
def _matmul_by_alias(x: tl.constexpr, w: tl.constexpr, out: tl.constexpr):
    out.copy_(_mm(x, w))


def test_an_alias_of_a_torch_function_is_refused_before_the_body_runs():
    x, w, out = torch.randn(4, 8), torch.randn(8, 3), torch.zeros(4, 3)
    message = _raises(lambda: _matmul_by_alias[(1,)](x, w, out))
    assert RULE in message
    assert "the Triton kernel `_matmul_by_alias` refers to `_mm` (torch" in message
    assert torch.count_nonzero(out) == 0


@triton.jit
def _matmul_by_getattr(x: tl.constexpr, w: tl.constexpr, out: tl.constexpr):
    out.copy_(getattr(x, "mat" + "mul")(w))


def test_getattr_by_string_is_refused():
    x, w, out = torch.randn(4, 8), torch.randn(8, 3), torch.zeros(4, 3)
    message = _raises(lambda: _matmul_by_getattr[(1,)](x, w, out))
    assert RULE in message and "calls the builtin `getattr`" in message


@triton.jit
def _add_with_numpy(x: tl.constexpr, y: tl.constexpr, out: tl.constexpr):
    out.numpy()[:] = x.numpy() + y.numpy()


def test_numpy_through_a_tensors_numpy_is_refused():
    x, y, out = torch.randn(16), torch.randn(16), torch.zeros(16)
    message = _raises(lambda: _add_with_numpy[(1,)](x, y, out))
    assert RULE in message and "uses `.numpy`" in message
    assert torch.count_nonzero(out) == 0


@triton.jit
def _add_on_interpreter_arrays(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    x.handle.data = np.add(x.handle.data, y.handle.data)
    tl.store(out_ptr + offs, x)


def test_numpy_on_the_interpreters_arrays_is_refused():
    x, y, out = torch.randn(16), torch.randn(16), torch.zeros(16)
    message = _raises(lambda: _add_on_interpreter_arrays[(1,)](x, y, out, BLOCK=16))
    assert RULE in message and "uses `.handle` (the interpreter's NumPy array behind a tl tensor)" in message


def _torch_helper(x, y, out):
    out.copy_(torch.add(x, y))


@triton.jit
def _calls_a_helper(x: tl.constexpr, y: tl.constexpr, out: tl.constexpr):
    _torch_helper(x, y, out)


def test_a_plain_helper_the_body_calls_is_read_too():
    x, y, out = torch.randn(16), torch.randn(16), torch.zeros(16)
    message = _raises(lambda: _calls_a_helper[(1,)](x, y, out))
    assert RULE in message
    assert "`_torch_helper` (called from the Triton kernel `_calls_a_helper`) refers to `torch`" in message


@triton.jit
def _op_passed_in(x: tl.constexpr, y: tl.constexpr, out: tl.constexpr, op: tl.constexpr):
    out.copy_(op(x, y))


def test_an_aten_op_handed_in_as_a_constexpr_is_stopped_as_it_runs():
    x, y, out = torch.randn(16), torch.randn(16), torch.zeros(16)
    message = _raises(lambda: _op_passed_in[(1,)](x, y, out, torch.ops.aten.add.Tensor))
    assert RULE in message and "_op_passed_in" in message and "add" in message
    assert torch.count_nonzero(out) == 0


@triton.jit
def _swallows(x: tl.constexpr, y: tl.constexpr, out: tl.constexpr, x_ptr):
    try:
        out.copy_(x + y)
    except BaseException:
        pass


def test_a_body_that_swallows_the_error_still_fails_the_launch():
    x, y, out = torch.randn(16), torch.randn(16), torch.zeros(16)
    message = _raises(lambda: _swallows[(1,)](x, y, out, x))
    assert RULE in message and "the Triton kernel `_swallows` calls Tensor.add" in message


def _vector_add_swallowing(x, y):
    """Host code that swallows the launch's error too: the case must still fail, naming the rule."""
    out = torch.empty_like(x)
    try:
        _swallows[(1,)](x, y, out, x)
    except Exception:  # noqa: BLE001
        pass
    out.copy_(x)
    return out


def test_check_fails_a_submission_that_swallows_every_error():
    result = check("vector_add", _vector_add_swallowing, quiet=True, plot=False)
    assert result.status == "failed"
    problems = " ".join(p for c in result.cases for p in c.problems)
    assert "uses torch to compute on the inputs" in problems and RULE in problems


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _vector_add_right(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


@triton.jit
def _add_with_torch(x: tl.constexpr, y: tl.constexpr, out: tl.constexpr):
    out.copy_(x + y)


def _vector_add_torch_in_body(x, y):
    out = torch.empty_like(x)
    _add_with_torch[(1,)](x, y, out)
    return out


def test_check_passes_an_honest_kernel_and_stops_torch_in_a_body():
    assert check("vector_add", _vector_add_right, quiet=True, plot=False).status == "passed"
    result = check("vector_add", _vector_add_torch_in_body, quiet=True, plot=False)
    assert result.status == "error"
    assert RULE in result.message and "the Triton kernel `_add_with_torch` calls Tensor.add" in result.message


def test_static_reading_finds_nothing_in_honest_kernels():
    assert interpreter.static_problems(_add_kernel) == []
    assert interpreter.static_problems(_bf16_ops) == []


def test_install_does_nothing_outside_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert interpreter.install() is False


# ---------------------------------------------------------------------------------------------------------------------
# bf16 in the interpreter: computed as on a GPU, not on the raw bit patterns.


@triton.jit
def _bf16_ops(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + 0 * BLOCK + offs, x + y)
    tl.store(out_ptr + 1 * BLOCK + offs, x * y)
    tl.store(out_ptr + 2 * BLOCK + offs, x * 2.0)
    tl.store(out_ptr + 3 * BLOCK + offs, x - y)
    tl.store(out_ptr + 4 * BLOCK + offs, -x)
    tl.store(out_ptr + 5 * BLOCK + offs, tl.where(x < y, x, y))
    tl.store(out_ptr + 6 * BLOCK + offs, tl.max(x, axis=0) + tl.zeros_like(x))
    tl.store(out_ptr + 7 * BLOCK + offs, tl.maximum(x, y))


def test_bf16_arithmetic_matches_torch():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, generator=gen).bfloat16()
    y = torch.randn(64, generator=gen).bfloat16()
    out = torch.zeros(8, 64, dtype=torch.bfloat16)
    _bf16_ops[(1,)](x, y, out, BLOCK=64)
    want = torch.stack([x + y, x * y, x * 2.0, x - y, -x, torch.where(x < y, x, y), x.max().expand(64),
                        torch.maximum(x, y)])
    for i, (got, ref) in enumerate(zip(out, want)):
        assert torch.equal(got, ref), (i, got[:4], ref[:4])


@triton.jit
def _bf16_dot(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(out_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))


def test_bf16_dot_matches_a_float32_matmul():
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(16, 16, generator=gen).bfloat16()
    b = torch.randn(16, 16, generator=gen).bfloat16()
    out = torch.zeros(16, 16)
    _bf16_dot[(1,)](a, b, out, N=16)
    torch.testing.assert_close(out, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


@triton.jit
def _to_bf16(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.bfloat16))


def test_float32_to_bf16_rounds_to_nearest_even_as_torch():
    x = torch.tensor([1 + 2**-8 + 2**-12, 1 + 3 * 2**-8, -(1 + 2**-7 + 2**-9), 3.0e38, 1e-40, 0.1, -2.5, 7.0] * 2)
    out = torch.zeros(16, dtype=torch.bfloat16)
    _to_bf16[(1,)](x, out, BLOCK=16)
    assert torch.equal(out.view(torch.int16), x.bfloat16().view(torch.int16))


def _vector_add_bf16_arithmetic(x, y):
    """vector_add's inputs (float32) added in bf16 and widened back: a right kernel with bf16 arithmetic is judged on
    its bf16 rounding only (within the exercise's float32 tolerance this fails, but never as 'never written')."""
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    _add_bf16[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


@triton.jit
def _add_bf16(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.bfloat16)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.bfloat16)
    tl.store(out_ptr + offs, (x + y).to(tl.float32), mask=mask)


def test_bf16_arithmetic_is_never_told_elements_were_never_written():
    result = check("vector_add", _vector_add_bf16_arithmetic, quiet=True, plot=False)
    problems = " ".join(p for c in result.cases for p in c.problems)
    assert result.status == "failed" and "never written" not in problems and "non-finite" not in problems
    assert "elements differ" in problems  # bf16's precision against a float32 reference: an honest difference
