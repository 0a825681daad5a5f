"""Lesson 07: quantization: int8 and packed int4 weights, and GEMV kernels that turn fewer bytes into speed."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="07", title="Quantization: int8 and packed int4 weight-only GEMV", notebook="07_quantization",
                needs=("gpu", "triton", "bf16"),
                cpu_mode="quantization, packing and the kernels run (Triton in the interpreter, small sizes); "
                         "no timings")
