"""A cheat: torch.softmax over whole rows (one read per element, but not in blocks)."""
import torch


def online_softmax(x, block):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
