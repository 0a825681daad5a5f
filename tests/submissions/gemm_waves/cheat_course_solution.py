"""Cheat (issue 17): the instructor's own function, imported from the course package and passed off. While the
learner's function runs, the course's solution raises instead of answering: an error naming it."""
from gpucourse.lessons.l06_tensor_cores.waves import gemm_waves  # noqa: F401
