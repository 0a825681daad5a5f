"""Error: does not parse."""
import torch


def vector_add(x, y)
    return x + y
