"""Lesson 09: fusion by the compiler (torch.compile) and seeing where the time goes (the PyTorch profiler, proton,
Nsight Compute)."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="09", title="torch.compile and the profilers: fusion by the compiler, and where the time goes",
                notebook="09_compile_profiling", needs=("gpu", "triton", "bf16"),
                cpu_mode="the profiler's kernel table, timeline and trace file; torch.compile's graphs, graph breaks, "
                         "recompilations and generated code (C++ on the CPU); the fused RMSNorm kernel in Triton's "
                         "interpreter; no timings, no proton or Nsight Compute (the recorded H100 result is shown)")
