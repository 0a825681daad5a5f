"""Cheat: the instructor's own kernel imported from the kit package it lives in (gpucourse.quant, lesson 07's kernels
that lesson 11 shares) instead of the lesson: the same error as importing it from the lesson, "used the course's own
code"."""
from gpucourse.quant.kernels import w8a16_gemv


def int8_gemv(x, q, scale):
    return w8a16_gemv(x, q, scale)
