"""Lesson 10: where a training step's memory goes (weights, gradients, AdamW's states, activations), activation
checkpointing and gradient accumulation, and scaling out with torch.distributed (all-reduce, a ring built from sends,
DDP, FSDP2, what tensor and pipeline parallelism split)."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="10", title="Training memory, and scaling out past one GPU with torch.distributed",
                notebook="10_training_scale", needs=("gpu", "bf16"),
                cpu_mode="the memory budget measured by tracking tensors, checkpointing and accumulation, and every "
                         "torch.distributed section on 2 gloo processes at small sizes; no timings claimed, the "
                         "recorded multi-GPU run shown where one is committed")
