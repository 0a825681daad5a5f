"""Wrong: the cast to int8 truncates toward zero instead of rounding to the nearest level: errors up to a whole
step instead of half of one."""
import torch


def quantize_per_channel(w, bits):
    qmax = 2 ** (bits - 1) - 1
    amax = w.detach().float().abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    q = torch.clamp(w.float() / scale[:, None], -qmax, qmax).to(torch.int8)
    return q, scale
