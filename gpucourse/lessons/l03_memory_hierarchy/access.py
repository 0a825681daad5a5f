"""Access patterns: why the same number of useful bytes can cost very different amounts of memory traffic.

Device memory is read in 32-byte *sectors* (four to a 128-byte cache line). When the 32 threads of a warp load one
float32 each from consecutive addresses, they need 4 sectors: every byte fetched is used ("coalesced"). With a stride
of 2 elements they touch 8 sectors and use half of each; from a stride of 8 floats on, or at random addresses, every
thread needs its own sector and 7/8 of the traffic is wasted. :func:`sectors_per_warp` counts this for any pattern;
:func:`read_pattern` is a Triton kernel that reads with a given pattern and writes what it read contiguously, so the
cost can be measured. :func:`predicted_fraction` models what that kernel moves: its reads at the efficiency of the
pattern *and* its coalesced writes, against a copy that moves both at full efficiency. :func:`copy` is a plain Triton
copy kernel (the working-set sweep times it).
"""
from __future__ import annotations

import triton
import triton.language as tl

WARP = 32
SECTOR_BYTES = 32
PATTERNS = ("coalesced", "strided", "random")
# Odd (and below 2^31, so an int32 constant in Triton): i -> (i * _MULT) mod 2^k permutes 0..2^k-1, which gives a
# scattered "random" pattern without an index array.
_MULT = 1103515245


def offsets(pattern: str, n: int, stride: int = 1, src_len: int | None = None) -> list:
    """The element offsets the first ``n`` threads read under ``pattern`` (what :func:`read_pattern` reads)."""
    if pattern == "coalesced":
        return list(range(n))
    if pattern == "strided":
        return [i * stride for i in range(n)]
    if pattern == "random":
        m = src_len or n
        if m & (m - 1):
            raise ValueError("the random pattern needs a power-of-two source length (it permutes 0..m-1)")
        return [(i * _MULT) % m for i in range(n)]
    raise ValueError(f"pattern must be one of {PATTERNS}, not {pattern!r}")


def sectors_per_warp(offs, elem_bytes: int = 4, sector: int = SECTOR_BYTES) -> float:
    """Average number of distinct ``sector``-byte memory sectors one warp (32 consecutive threads) touches."""
    offs = list(offs)
    warps = [offs[i:i + WARP] for i in range(0, len(offs), WARP)]
    return sum(len({(o * elem_bytes) // sector for o in w}) for w in warps) / len(warps)


def efficiency(offs, elem_bytes: int = 4, sector: int = SECTOR_BYTES) -> float:
    """Useful bytes / fetched bytes for a warp's loads: 1.0 when coalesced, 1/8 for scattered float32 loads."""
    return WARP * elem_bytes / (sectors_per_warp(offs, elem_bytes, sector) * sector)


def predicted_fraction(offs, elem_bytes: int = 4, fetch_bytes: int = SECTOR_BYTES) -> float:
    """The fraction of a coalesced copy's useful GB/s that :func:`read_pattern` should reach with these offsets.

    Per element it counts ``elem_bytes`` read and ``elem_bytes`` written as useful (what the measured GB/s counts).
    Device memory moves the reads in units of ``fetch_bytes`` (``efficiency`` of the pattern: ``elem_bytes / eff``
    bytes fetched per element read) and the writes at full efficiency. At one bandwidth, time is proportional to the
    bytes moved, so the fraction is ``2 / (1 / eff + 1)``: 2/3 at half efficiency, 2/9 at 1/8 (not 1/2 and 1/8: the
    write costs the same in every case and dilutes the waste of the read).
    """
    eff = efficiency(offs, elem_bytes, fetch_bytes)
    return 2 / (1 / eff + 1)


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def copy(src, dst, BLOCK: int = 4096):
    """``dst[:] = src`` with one Triton kernel (both contiguous, same size): reads each byte once, writes it once."""
    n = src.numel()
    _copy_kernel[(triton.cdiv(n, BLOCK),)](src, dst, n, BLOCK=BLOCK, num_warps=8)
    return dst


@triton.jit
def _read_pattern_kernel(src_ptr, out_ptr, n, src_len, stride, PATTERN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if PATTERN == 0:  # coalesced: neighbouring lanes read neighbouring elements
        src = offs
    elif PATTERN == 1:  # strided: lane i reads element i * stride
        src = offs * stride
    else:  # "random": a fixed permutation of 0..src_len-1 (src_len a power of two)
        src = (offs * 1103515245) & (src_len - 1)
    x = tl.load(src_ptr + src, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)  # the writes are always coalesced


def read_pattern(src, n: int, pattern: str, stride: int = 1, BLOCK: int = 1024):
    """``out[i] = src[offsets(pattern)[i]]`` for i < n, with one Triton kernel. ``src`` is 1-D and contiguous."""
    import torch

    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, not {pattern!r}")
    if src.dim() != 1 or not src.is_contiguous():
        raise ValueError("src must be a contiguous 1-D tensor")
    m = src.numel()
    need = (n - 1) * stride + 1 if pattern == "strided" else n
    if need > m or (pattern == "random" and m & (m - 1)):
        raise ValueError(f"src has {m} elements; the {pattern} pattern over n={n} needs {need}"
                         + (" and a power-of-two length" if pattern == "random" else ""))
    out = torch.empty(n, dtype=src.dtype, device=src.device)
    grid = (triton.cdiv(n, BLOCK),)
    _read_pattern_kernel[grid](src, out, n, m, stride, PATTERN=PATTERNS.index(pattern), BLOCK=BLOCK)
    return out


def read_pattern_torch(src, n: int, pattern: str, stride: int = 1):
    """The same reads done by torch: a copy of a view (coalesced, strided) or an index_select (random)."""
    import torch

    if pattern == "coalesced":
        return src[:n].clone()
    if pattern == "strided":
        return src[: (n - 1) * stride + 1 : stride].clone()
    idx = torch.tensor(offsets("random", n, src_len=src.numel()), device=src.device) if n <= 2**16 else \
        (torch.arange(n, device=src.device, dtype=torch.int64) * _MULT) % src.numel()
    return torch.index_select(src, 0, idx)
