"""Right: one scale per row from that row's max |w|, rows of zeros get scale 1.0, round to nearest and clamp."""
import torch


def quantize_per_channel(w, bits):
    qmax = 2 ** (bits - 1) - 1
    amax = w.detach().float().abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    q = torch.clamp(torch.round(w.float() / scale[:, None]), -qmax, qmax).to(torch.int8)
    return q, scale
