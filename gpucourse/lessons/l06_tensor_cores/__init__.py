"""Lesson 06: tensor cores: the dtype ladder, alignment, tile and wave quantization, mixed precision, FP8."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="06", title="Tensor cores: precision, alignment, tiles and waves, FP8", notebook="06_tensor_cores",
                needs=("gpu", "triton", "bf16", "tf32", "fp8"),
                cpu_mode="the wave model and its explorer, the dtype error study (emulated with .to()) and the FP8 "
                         "kernel in the interpreter; no timings")
