"""Lesson 06's GPU measurements, gathered in one namespace: the dtype ladder and the clocks under load
(:mod:`.ladder`), alignment and the wave sweep (:mod:`.shapes`), FP8 against ``torch._scaled_mm`` (:mod:`.fp8`).
Every timing goes through :mod:`gpucourse.timing` and returns plain dicts (the notebook prints them and the
benchmarks in ``bench.py`` record them)."""
from .ladder import (  # noqa: F401
    peak, dtype_ladder, low_dtype, clocks_under_load, format_load)
from .shapes import (  # noqa: F401
    alignment, row_alignment, alignment_summary, kernel_family, short_kernel_name, cublas_kernels, wave_sweep,
    compare_with_model)
from .fp8 import (  # noqa: F401
    FP8_PRECISE, FP8_FAST, FP8_ROW_MAJOR, round_ratios,
    fp8_like_for_like, format_like_for_like, fp8_accuracy_modes, ACCURACY_NAMES, accuracy_rows)
