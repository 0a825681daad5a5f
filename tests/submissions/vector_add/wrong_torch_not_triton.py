"""Wrong for this exercise: the right numbers, but from torch, not from a Triton kernel."""
import torch


def vector_add(x, y):
    return torch.add(x, y)
