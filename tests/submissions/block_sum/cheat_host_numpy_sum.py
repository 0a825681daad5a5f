"""Cheat (issue 17): the sum computed on the host in NumPy (x copied to the CPU), sent back as a 0-d tensor. No CUDA
kernel of its own, and a copy of the input to another device to compute there: fails."""
import numpy as np
import torch


def block_sum(x):
    s = np.sum(x.cpu().numpy(), dtype=np.float64)
    return torch.tensor(float(s), dtype=torch.float32, device=x.device)
