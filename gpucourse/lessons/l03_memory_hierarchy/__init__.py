"""Lesson 03: the memory hierarchy and the roofline: working sets, access patterns, fusion."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="03", title="memory hierarchy and the roofline", notebook="03_memory_hierarchy",
                needs=("gpu", "triton"), cpu_mode="Triton kernels run in the interpreter at small sizes; no timings")
