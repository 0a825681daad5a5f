"""Can this Triton's interpreter run ``tl.dot`` on FP8 operands? (Triton 3.9's can; older ones may not.)

Asked once per process by the fp8_matmul exercise in CPU mode; the answer decides whether CPU mode checks learners'
kernels on FP8 operands or on float16 stand-ins holding the same (FP8-representable) values.
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_answer: tuple | None = None


def interpreter_runs_fp8() -> tuple:
    """(True, "") when a 16×16×16 e4m3 ``tl.dot`` gives the exact product in the interpreter, else (False, why).

    Asked once per process, under a lock: the batch grader draws inputs in threads (``--jobs``), and Triton's
    interpreter is not safe to run from two threads at once. Two concurrent first probes once answered differently,
    so one submission's cases came in two dtypes (a CI run of 2026-11-25)."""
    global _answer
    with _lock:
        if _answer is None:
            _answer = _probe()
        return _answer


def _probe() -> tuple:
    try:
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def _dot16(a_ptr, b_ptr, c_ptr):
            r = tl.arange(0, 16)
            a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
            b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
            tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b))

        gen = torch.Generator().manual_seed(0)
        a = torch.randn(16, 16, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(16, 16, generator=gen).to(torch.float8_e4m3fn)
        c = torch.zeros(16, 16)
        _dot16[(1,)](a, b, c)
        want = a.double() @ b.double()
        if not torch.allclose(c.double(), want, rtol=1e-5, atol=1e-5):
            return False, f"Triton {triton.__version__}'s interpreter computes FP8 tl.dot wrongly"
        return True, ""
    except Exception as exc:  # any failure means: not usable here
        import triton

        return False, f"Triton {triton.__version__}'s interpreter cannot run FP8 tl.dot ({type(exc).__name__})"
