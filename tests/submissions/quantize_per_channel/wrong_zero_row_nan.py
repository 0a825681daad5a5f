"""Wrong: a row of zeros gets scale 0, so 0 / 0 is NaN (and the int8 cast of NaN is garbage)."""
import torch


def quantize_per_channel(w, bits):
    qmax = 2 ** (bits - 1) - 1
    scale = w.detach().float().abs().amax(dim=1) / qmax
    q = torch.clamp(torch.round(w.float() / scale[:, None]), -qmax, qmax).to(torch.int8)
    return q, scale
