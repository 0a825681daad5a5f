"""Right: even columns in the low nibble, odd columns in the high nibble, two's complement nibbles."""
import torch


def pack_int4(q):
    if q.shape[-1] % 2:
        raise ValueError(f"K = {q.shape[-1]} is odd: two int4 values share a byte")
    u = q.to(torch.int16) & 0xF
    return (u[:, 0::2] | (u[:, 1::2] << 4)).to(torch.uint8)
