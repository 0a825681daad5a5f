"""Cheat (the documented limitation): answers with torch and forges the grader's launch counter in-process.

The grader cannot prevent code in the worker's process from lying about itself; it flags the source instead.
"""
import torch


def vector_add(x, y):
    import gpucourse.grading.launches as launches

    launches._counts["fake_kernel"] += 1
    return x + y
