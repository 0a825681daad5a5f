"""What the GEMV paths of :mod:`.kernels` and :mod:`.tensorcore` share: the checks of their arguments, with the
messages a caller sees, and the view of packed bytes as 32-bit words."""
from __future__ import annotations

import torch

from .block_sizes import INTERPRETED

try:
    import triton
except ImportError:  # no Triton (macOS/Windows)
    triton = None

ACT_DTYPES = (torch.bfloat16, torch.float16)


def _words(t: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-byte (N, K) tensor, K a multiple of 4, as int32 words (N, K // 4); copied first if its start
    is not 16-byte aligned (a view that begins mid-row, say), which a word view would refuse or load slowly."""
    if t.data_ptr() % 16:
        t = t.clone()
    return t.view(torch.int32)


def _need_triton():
    if triton is None:
        raise RuntimeError("the quantized GEMV kernels need Triton (Linux); it is not installed here")


def _check_x(x, k_expected=None, what="q"):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, not {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (M, K): one row per token; got shape {tuple(x.shape)} (use x[None] for "
                         f"a single vector)")
    if x.dtype not in ACT_DTYPES:
        raise TypeError(f"x must be bfloat16 or float16 (the activations of a W8A16/W4A16 layer), not {x.dtype}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"x must have at least one row and one column; got shape {tuple(x.shape)}")
    if k_expected is not None and x.shape[1] != k_expected:
        raise ValueError(f"x has K = {x.shape[1]} columns but {what} has K = {k_expected}")


def _same_device(**tensors):
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError("all tensors must be on one device; got " +
                         ", ".join(f"{name} on {d}" for name, d in devices.items()))
    dev = next(iter(devices.values()))
    if dev.type != "cuda" and not INTERPRETED:
        raise ValueError(f"the kernels run on a CUDA GPU (or in Triton's interpreter in CPU mode); tensors are on "
                         f"{dev}")


def check_group_size(group_size, k: int) -> None:
    """The group sizes the W4A16 kernel takes: a power of two from 32 up that divides K."""
    if not isinstance(group_size, int) or group_size < 32 or group_size & (group_size - 1):
        raise ValueError(f"group_size must be a power of two >= 32 (32, 64, 128, ...), not {group_size!r}")
    if k % group_size:
        raise ValueError(f"group_size {group_size} does not divide K = {k}: every group must be whole")
