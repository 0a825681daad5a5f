"""Lesson 01: CPU vs GPU timing: where the GPU starts to win, and the mistakes that make timings lie."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="01", title="CPU vs GPU timing", notebook="01_cpu_vs_gpu_timing", needs=("gpu",),
                cpu_mode="CPU timings only; GPU timing cells skip")
