"""Wrong: one scale for the whole tensor (max over every weight), repeated for each row: the rows with small
weights get a grid far too coarse for them, which is what per-channel scales exist to avoid."""
import torch


def quantize_per_channel(w, bits):
    qmax = 2 ** (bits - 1) - 1
    amax = w.detach().float().abs().max()
    s = amax / qmax if amax > 0 else torch.ones((), device=w.device)
    scale = s.expand(w.shape[0]).clone().float()
    q = torch.clamp(torch.round(w.float() / scale[:, None]), -qmax, qmax).to(torch.int8)
    return q, scale
