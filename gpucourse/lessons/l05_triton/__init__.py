"""Lesson 05: Triton kernels: vector add, autotuning, a fused softmax, a matmul with a fused epilogue."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="05", title="Triton kernels", notebook="05_triton",
                needs=("gpu", "triton", "bf16"),
                cpu_mode="Triton kernels run in the interpreter at small sizes; no timings")
