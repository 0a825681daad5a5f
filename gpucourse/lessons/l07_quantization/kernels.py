"""Lesson 07's GEMV kernels, under the name the lesson's notebook and its readers use: they live in the kit,
:mod:`gpucourse.quant.kernels` (with :mod:`gpucourse.quant.tensorcore`, the Hopper path), because lesson 11's decode
loop runs them too. The names the notebook reads are re-exported here."""
from gpucourse.quant.kernels import (gemv_bytes, reference_gemv, tc_available, w4a16_gemv,  # noqa: F401
                                     w4a16_path, w8a16_gemv)

try:
    import triton
except ImportError:  # no Triton (macOS/Windows): the kernels are unavailable, the rest of the lesson is not
    triton = None

if triton is not None:  # the jit functions the notebook prints the source of
    from gpucourse.quant.kernels import (_PAIR_ASM, _group_dot, _int4_pairs, field_to_float,  # noqa: F401
                                         w4a16_tc_kernel)
