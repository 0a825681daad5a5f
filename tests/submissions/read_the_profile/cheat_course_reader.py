"""Cheat: the course's own trace reader answers (gpucourse.lessons.l09_compile_profiling.readtrace). Fails: it is
trapped while the submission runs."""
from gpucourse.lessons.l09_compile_profiling import readtrace


def read_the_profile(trace):
    return readtrace.answers(trace)
