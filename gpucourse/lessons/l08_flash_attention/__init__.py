"""Lesson 08: FlashAttention's online softmax, from the derivation to a Triton kernel measured against every SDPA
backend."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="08", title="FlashAttention: the online softmax and a fused attention kernel",
                notebook="08_flash_attention", needs=("gpu", "triton", "bf16"),
                cpu_mode="the online-softmax derivation and its chunked demo, and the attention kernels (forward and "
                         "backward) in Triton's interpreter at small sizes; no timings")
