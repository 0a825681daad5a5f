"""A weight-only int4 linear layer for a model's forward pass: :class:`Int4Linear` quantizes a float weight once
(symmetric, a float32 scale per group of K, as lesson 07 does), lays it out once for the kernel that applies it, and
computes ``x @ W_hat.T`` on every call. Two kernels (``backend``):

* ``"lesson"``: lesson 07's GEMV as a model runs it (what lesson 07's ``measure.lesson_int4`` times): on a Hopper GPU
  with bf16 x the tensor-core path on tile-major weights (:func:`.kernels.tile_major`, :func:`.kernels.w4a16_tiled`),
  elsewhere :func:`.kernels.w4a16_gemv` on the packed weights (its rows or dot path; in CPU mode Triton's
  interpreter, slow: small shapes only);
* ``"tinygemm"``: PyTorch's own int4 kernel, ``torch._weight_int4pack_mm`` (:mod:`.tinygemm`; on the CPU its CPU
  twin), bf16 x only, its scales rounded to bf16 (its format).

Everything a call reads is made at construction, on the weight's device, and a call neither waits for the GPU nor
copies a weight, so calls can be captured in a CUDA graph (call each layer once first: Triton compiles a kernel on
its first call). Lesson 11's decode loop uses it; lesson 07 teaches the kernels.
"""
from __future__ import annotations

import types

import torch

from .block_sizes import INTERPRETED, configs
from .common import ACT_DTYPES, check_group_size
from .kernels import tc_available, tc_config, tile_major, w4a16_gemv, w4a16_path, w4a16_tiled
from .packing import pack_int4, unpack_int4_torch
from .symmetric import dequantize, quantize
from .tensorcore import _tile_counters
from .tinygemm import tinygemm_mm, tinygemm_unavailable, tinygemm_weights

try:
    import triton
except ImportError:  # no Triton (macOS/Windows): the "lesson" backend is unavailable, tinygemm is not
    triton = None

BACKENDS = ("lesson", "tinygemm")
TC_ROWS_PREPARED = 256  # the tc path's split-K counters are made at construction for calls of up to this many rows


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _check_args(k: int, group_size, backend: str, device) -> None:
    """What both constructors refuse before any work: an unknown backend, groups that do not tile K, a backend that
    cannot run on ``device``, a group size the lesson's kernel does not take."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    if not isinstance(group_size, int) or group_size < 1 or k % group_size:
        raise ValueError(f"K = {k} is not a multiple of group_size {group_size!r}: every group of K must be whole")
    why = int4_unavailable(backend, None, device)
    if why:
        raise RuntimeError(f"the {backend!r} int4 backend cannot run here: {why}")
    if backend == "lesson":
        check_group_size(group_size, k)


def int4_unavailable(backend: str, dtype=None, device="cpu") -> str | None:
    """Why :class:`Int4Linear` with ``backend`` cannot run for activations of ``dtype`` on ``device`` (``dtype``
    None: for none of them), or None where it can."""
    if backend not in BACKENDS:
        return f"backend must be one of {BACKENDS}, not {backend!r}"
    device = torch.device(device)
    if backend == "tinygemm":
        return tinygemm_unavailable(torch.bfloat16 if dtype is None else dtype, device)
    if triton is None:
        return "the lesson's int4 GEMV needs Triton (Linux); it is not installed here"
    if device.type != "cuda" and not INTERPRETED:
        return (f"the lesson's int4 GEMV runs on a CUDA GPU, or on the CPU in Triton's interpreter (CPU mode); "
                f"tensors on {device.type} with the interpreter off")
    if dtype is not None and dtype not in ACT_DTYPES:
        return f"the lesson's int4 GEMV takes bfloat16 or float16 activations, not {_dtype_name(dtype)}"
    return None


class Int4Linear:
    """A (N, K) float weight ``w`` quantized to int4 with a float32 scale per group of ``group_size`` along K, applied
    as ``x @ W_hat.T`` by ``backend`` (see the module docstring). ``x`` (..., K), bf16 or fp16 ("tinygemm": bf16),
    on the weight's device -> (..., N) in x's dtype.

    ``shape`` (N, K); ``group_size``; ``backend``; ``nbytes``: the bytes of weight data a call with bf16 x reads
    (int4 values and scales, in the backend's layout); ``packed`` (N, K // 2) uint8 and ``scales`` (N, K // group)
    float32: the int4 weight in lesson 07's format (kept: :meth:`dequantized` and the non-tc paths read them)."""

    def __init__(self, w: torch.Tensor, group_size: int = 128, backend: str = "lesson"):
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"w must be a torch.Tensor, not {type(w).__name__}")
        if w.dim() != 2 or not w.is_floating_point():
            raise ValueError(f"w must be a 2-D floating-point weight (N, K), one row per output; got "
                             f"{_dtype_name(w.dtype)} of shape {tuple(w.shape)}")
        _check_args(w.shape[1], group_size, backend, w.device)
        q, scales = quantize(w, 4, "group", group_size)
        self._lay_out(pack_int4(q), scales, group_size, backend)

    @classmethod
    def from_int4(cls, packed: torch.Tensor, scales: torch.Tensor, group_size: int,
                  backend: str = "lesson") -> Int4Linear:
        """The layer of a weight already in lesson 07's int4 format (``packed`` (N, K // 2) uint8, float32 ``scales``
        (N, K // group_size)), laid out for ``backend`` as the constructor lays out its own: lesson 07 times its
        kernels "as a model runs them" through this, so lesson 11's int4 model runs what lesson 07 measured."""
        if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.dim() != 2:
            raise ValueError("packed must be a 2-D uint8 tensor (N, K // 2): two int4 values a byte (pack_int4)")
        n, k = packed.shape[0], 2 * packed.shape[1]
        _check_args(k, group_size, backend, packed.device)
        if not isinstance(scales, torch.Tensor) or scales.dtype != torch.float32 or \
                tuple(scales.shape) != (n, k // group_size):
            raise ValueError(f"scales must be float32 of shape (N, K // group_size) = {(n, k // group_size)}; got "
                             f"{getattr(scales, 'dtype', type(scales).__name__)} of shape "
                             f"{tuple(getattr(scales, 'shape', ()))}")
        if scales.device != packed.device:
            raise ValueError(f"packed is on {packed.device} but scales are on {scales.device}")
        self = cls.__new__(cls)
        self._lay_out(packed, scales, group_size, backend)
        return self

    def _lay_out(self, packed: torch.Tensor, scales: torch.Tensor, group_size: int, backend: str) -> None:
        """Keep the int4 weight and make what ``backend`` reads: tinygemm's format, or on a Hopper GPU (bf16 x) the
        tile-major copy the tc path reads; the byte count a call reads."""
        n, k = packed.shape[0], 2 * packed.shape[1]
        self.shape, self.group_size, self.backend, self.device = (n, k), group_size, backend, packed.device
        self.packed, self.scales = packed, scales
        self._tiled = self._tg = None
        if backend == "tinygemm":
            inner = next((t for t in (8, 4, 2) if k % (16 * t) == 0), None)
            if inner is None:
                raise ValueError(f"tinygemm needs K a multiple of 32; got K = {k}")
            self._tg = tinygemm_weights(self.packed, self.scales, group_size, inner_k_tiles=inner)
            self.nbytes = self._tg["w"].numel() * self._tg["w"].element_size() + \
                self._tg["scales_and_zeros"].numel() * self._tg["scales_and_zeros"].element_size()
            return
        bf16_x = types.SimpleNamespace(dtype=torch.bfloat16, device=packed.device)  # what tc_available reads of an x
        if configs()["w4_tc_max_m"] >= 1 and tc_available(bf16_x, group_size):
            self._tiled = tile_major(self.packed, self.scales, group_size)
            block_n = min(tc_config(1)["BLOCK_N"], tc_config(TC_ROWS_PREPARED)["BLOCK_N"])
            m_blocks = -(-TC_ROWS_PREPARED // tc_config(TC_ROWS_PREPARED)["MX"])
            _tile_counters(packed.device, -(-n // block_n) * m_blocks)  # made now, not inside a graph capture
            self.nbytes = self._tiled.nbytes()
        else:
            self.nbytes = self.packed.numel() + self.scales.numel() * 4

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n, k = self.shape
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, not {type(x).__name__}")
        if x.dim() < 1 or x.shape[-1] != k:
            raise ValueError(f"x must be (..., K) with K = {k} (the weight's columns); got shape {tuple(x.shape)}")
        if x.device != self.device:
            raise ValueError(f"x is on {x.device} but the int4 weight is on {self.device}")
        why = int4_unavailable(self.backend, x.dtype, x.device)
        if why:
            raise TypeError(f"the {self.backend!r} int4 backend cannot take this x: {why}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, k)
        if x2.shape[0] == 0:
            return x.new_empty(*lead, n)
        if self._tg is not None:
            y = tinygemm_mm(x2, self._tg)
        elif self._tiled is not None and w4a16_path(x2, self.group_size) == "tc":
            y = w4a16_tiled(x2, self._tiled)
        else:
            y = w4a16_gemv(x2, self.packed, self.scales, self.group_size)
        return y.reshape(*lead, n)

    def dequantized(self) -> torch.Tensor:
        """The float32 weight (N, K) the backend multiplies by: int4 values times their group's scale (for tinygemm
        its bf16 scales), on the weight's device; for references."""
        scales = self.scales if self._tg is None else self.scales.to(torch.bfloat16).to(torch.float32)
        return dequantize(unpack_int4_torch(self.packed), scales, self.group_size)

    def __repr__(self) -> str:
        n, k = self.shape
        return (f"Int4Linear(N={n}, K={k}, group_size={self.group_size}, backend={self.backend!r}, "
                f"{'tile-major tc path, ' if self._tiled is not None else ''}{self.nbytes} bytes, {self.device})")
