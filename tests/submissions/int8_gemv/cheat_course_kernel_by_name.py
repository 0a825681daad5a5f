"""Cheat (issue 39, class 3): the instructor's kernel (lesson 07's w8a16_gemv) reached through a module name built at
run time, so no import statement names the course's lessons. Its launches are the course's: it fails with "used the
course's own code: launched the course's kernel", never "no Triton kernel was launched"."""
import importlib

_kernels = importlib.import_module(".".join(["gpucourse", "lessons", "l07_quantization", "kernels"]))


def int8_gemv(x, q, scale):
    return _kernels.w8a16_gemv(x, q, scale)
