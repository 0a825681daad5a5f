"""Wrong: packs an odd K anyway (the last value of each row alone in its byte) instead of raising a ValueError."""
import torch
import torch.nn.functional as F


def pack_int4(q):
    if q.shape[-1] % 2:
        q = F.pad(q, (0, 1))
    u = q.to(torch.int16) & 0xF
    return (u[:, 0::2] | (u[:, 1::2] << 4)).to(torch.uint8)
