"""Lesson 02: the asynchronous pipeline: hidden synchronizations, pinned memory, CUDA graphs, a training loop."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="02", title="the asynchronous pipeline",
                notebook="02_async_pipeline", needs=("gpu",),
                cpu_mode="the sync detector and timelines run on CPU; GPU timings skip")
