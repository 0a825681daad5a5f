"""int4 packing: two signed 4-bit values in one byte, along each row.

The layout (the same in :func:`pack_int4`, :func:`unpack_int4`, the W4A16 kernel and the workbook)::

    q[n, 2j]   -> bits 0..3 of packed[n, j]   (the low nibble)
    q[n, 2j+1] -> bits 4..7 of packed[n, j]   (the high nibble)

Each nibble holds its value in 4-bit two's complement: -8..7 as 0b1000..0b0111 (-1 is 0b1111). ``packed`` is
uint8 of shape (N, K // 2): K must be even. Unpacking the high nibble of the byte read as a *signed* 8-bit integer
is one arithmetic shift right by 4 (the sign is copied into the upper bits); the low nibble is shifted to the top
first and then back down (``(b << 28) >> 28`` on 32 bits), which drags its own sign bit along. A logical shift or a
mask (``b & 0xF``) leaves 8..15 where -8..-1 should be.
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # macOS/Windows: packing in torch still works, the Triton unpacker does not
    triton = tl = None


def _check_int4(q) -> None:
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, not {type(q).__name__}")
    if q.dtype != torch.int8:
        raise TypeError(f"q must be int8 (int4 values stored one per byte), not {q.dtype}")
    if q.dim() != 2:
        raise ValueError(f"q must be 2-D (N, K); got shape {tuple(q.shape)}")
    if q.shape[1] % 2:
        raise ValueError(f"K = {q.shape[1]} is odd: two int4 values share a byte, so K must be even (pad the row "
                         f"with a zero column)")


def pack_int4(q: torch.Tensor, check_range: bool = True) -> torch.Tensor:
    """(N, K) int8 in [-8, 7] -> (N, K // 2) uint8, even columns in the low nibbles (see the module docstring)."""
    _check_int4(q)
    if check_range and q.numel() and (int(q.min()) < -8 or int(q.max()) > 7):
        raise ValueError(f"int4 values must lie in [-8, 7]; got min {int(q.min())}, max {int(q.max())}")
    u = q.to(torch.int16) & 0xF  # two's complement nibbles: -1 -> 15, -8 -> 8
    return (u[:, 0::2] | (u[:, 1::2] << 4)).to(torch.uint8)


def unpack_int4_torch(p: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`pack_int4`, in torch: (N, K // 2) uint8 -> (N, K) int8."""
    if not isinstance(p, torch.Tensor) or p.dtype != torch.uint8 or p.dim() != 2:
        raise TypeError(f"p must be a 2-D uint8 tensor (packed int4), got "
                        f"{getattr(p, 'dtype', type(p).__name__)} of shape {tuple(getattr(p, 'shape', ()))}")
    b = p.to(torch.int16)
    lo = ((b & 0xF) ^ 8) - 8  # sign-extend the nibble: 8..15 -> -8..-1
    hi = ((b >> 4) ^ 8) - 8
    return torch.stack((lo, hi), dim=2).reshape(p.shape[0], 2 * p.shape[1]).to(torch.int8)


if triton is not None:
    @triton.jit
    def unpack_int4_kernel(p_ptr, out_ptr, n_bytes, BLOCK: tl.constexpr):
        """out[2i] = low nibble of p[i], out[2i+1] = high nibble, both sign-extended (p read as int8)."""
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_bytes
        b = tl.load(p_ptr + offs, mask=mask, other=0).to(tl.int32)  # int8 -> int32 copies the sign bit up
        lo = (b << 28) >> 28  # the low nibble to the top, then an arithmetic shift brings it back with its sign
        hi = b >> 4  # arithmetic: the high nibble, sign included
        tl.store(out_ptr + 2 * offs, lo.to(tl.int8), mask=mask)
        tl.store(out_ptr + 2 * offs + 1, hi.to(tl.int8), mask=mask)


def unpack_int4(p: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """(N, K // 2) uint8 -> (N, K) int8 with a Triton kernel (the shifts the W4A16 GEMV does in registers)."""
    if triton is None:
        raise RuntimeError("unpack_int4 needs Triton (Linux); unpack_int4_torch does the same in torch")
    if not isinstance(p, torch.Tensor) or p.dtype != torch.uint8 or p.dim() != 2:
        raise TypeError(f"p must be a 2-D uint8 tensor (packed int4), got "
                        f"{getattr(p, 'dtype', type(p).__name__)} of shape {tuple(getattr(p, 'shape', ()))}")
    p = p.contiguous()
    out = torch.empty(p.shape[0], 2 * p.shape[1], dtype=torch.int8, device=p.device)
    n = p.numel()
    if n:
        unpack_int4_kernel[(triton.cdiv(n, block),)](p.view(torch.int8), out, n, BLOCK=block)
    return out


def bit_layout(values=(3, -2), show: bool = True) -> str:
    """A text picture of one packed byte: which bits hold which value, for the pair ``values`` = (q[2j], q[2j+1])."""
    lo, hi = values
    for v in values:
        if not -8 <= v <= 7:
            raise ValueError(f"int4 values lie in [-8, 7], not {v}")
    byte = (lo & 0xF) | ((hi & 0xF) << 4)
    bits = f"{byte:08b}"
    lines = [
        "bit:      7  6  5  4 | 3  2  1  0",
        "value:    " + "  ".join(bits[:4]) + " | " + "  ".join(bits[4:]),
        f"          q[2j+1] = {hi:>2}   | q[2j]   = {lo:>2}",
        f"          high nibble {hi & 0xF:04b} | low nibble {lo & 0xF:04b}",
        f"byte = 0x{byte:02X} = {byte} (uint8), {byte - 256 if byte > 127 else byte} (int8)",
    ]
    text = "\n".join(lines)
    if show:
        print(text)
    return text
