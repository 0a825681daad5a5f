"""Lesson 11 (capstone): a small language model's batch-1 decoding made fast step by step, each step measured
against the memory-bandwidth floor."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="11", title="LLM decoding: from eager to the bandwidth floor", notebook="11_llm_decode",
                needs=("gpu", "triton", "bf16"),
                cpu_mode="the decoder at a tiny size in float32, every ladder step but CUDA graphs (tokens compared), "
                         "int4 weights through PyTorch's CPU int4 kernel, the floor's arithmetic, and the split-KV "
                         "kernel in Triton's interpreter; no timings, the recorded H100 run shown")
