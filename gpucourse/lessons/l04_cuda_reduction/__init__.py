"""Lesson 04: CUDA C++ through load_inline: a reduction ladder, summing many tensors in one launch."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="04", title="CUDA C++ reduction through load_inline",
                notebook="04_cuda_reduction", needs=("gpu", "nvcc", "ninja"),
                cpu_mode="CUDA sources are compile-checked with nvcc, not run; the reduction is simulated in NumPy")
