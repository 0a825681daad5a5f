"""Cheat (issue 17): the instructor's own kernel, imported from the course package (lesson 07's w8a16_gemv) and
passed off: an error, "used the course's own code" (its launches are the course's, not the learner's)."""
from gpucourse.lessons.l07_quantization.kernels import w8a16_gemv


def int8_gemv(x, q, scale):
    return w8a16_gemv(x, q, scale)
