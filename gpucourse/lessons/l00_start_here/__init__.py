"""Lesson 00: start here: the two modes, the doctor, timing a kernel, how exercises are checked."""
from gpucourse.lessons import Lesson

LESSON = Lesson(id="00", title="start here: modes, the doctor, timing, checks",
                notebook="00_start_here", needs=(), cpu_mode="")
