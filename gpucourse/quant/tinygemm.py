"""PyTorch's own int4 weight-only kernel, tinygemm (``torch._weight_int4pack_mm``), fed the course's int4 format:
lesson 07's strongest int4 peer. The conversion is done once per weight, as a model loader would
(:func:`tinygemm_weights`), and :func:`tinygemm_mm` calls the kernel (its CPU twin in CPU mode)."""
from __future__ import annotations

import torch

from gpucourse import dtypes

TINYGEMM_INNER_K_TILES = 8  # gpt-fast's choice (its int4 handler) and the largest: 16-byte loads of the packed words

# torch._weight_int4pack_mm (aten/src/ATen/native/cuda/int4mm.cu) computes x @ W.T with W[n, k] = (u - 8) * scale +
# zero for the unsigned nibble u in 0..15, scale and zero per group of K (bf16, scales_and_zeros [K / g, N, 2]); its
# weights are first rearranged by torch._convert_weight_to_int4pack into the tensor-core fragment order, from uint8
# [N, K / 2] holding column 2j in the HIGH nibble of byte j and column 2j + 1 in the low one (pytorch's
# test_linalg.py / common_quantization.py `_group_quantize_tensor`: out[:, ::2] << 4 | out[:, 1::2]). The course's
# symmetric int4 value q (-8..7, column 2j in the low nibble) is u = q + 8 with zero = 0: the same product.
# On the CPU, torch._convert_weight_to_int4pack_for_cpu takes the values u as int32 [N, K] and
# torch._weight_int4pack_mm_for_cpu computes the same product (the tests check the convention there).


def tinygemm_bytes(packed: torch.Tensor) -> torch.Tensor:
    """``pack_int4``'s bytes (N, K // 2) uint8 -> tinygemm's input bytes: each nibble offset to u = q + 8 (flip its
    top bit) and the two nibbles of each byte swapped (column 2j high, 2j + 1 low)."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.dim() != 2:
        raise TypeError(f"packed must be a 2-D uint8 tensor (N, K // 2) from pack_int4; got "
                        f"{getattr(packed, 'dtype', type(packed).__name__)}")
    t = packed ^ 0x88  # both nibbles: two's complement q -> q + 8
    return ((t & 0x0F) << 4) | (t >> 4)


def tinygemm_scales_and_zeros(scales: torch.Tensor, dtype=torch.bfloat16) -> torch.Tensor:
    """Group scales (N, K // g) -> tinygemm's ``scales_and_zeros`` (K // g, N, 2) in ``dtype``: the scale, and a zero
    point of 0 (symmetric quantization)."""
    if not isinstance(scales, torch.Tensor) or scales.dim() != 2:
        raise TypeError(f"scales must be a 2-D tensor (N, K // group_size); got {type(scales).__name__}")
    s = scales.t().to(dtype)
    return torch.stack((s, torch.zeros_like(s)), dim=2).contiguous()


def tinygemm_unavailable(dtype, device) -> str | None:
    """Why tinygemm cannot run for activations of ``dtype`` on ``device`` (None: it can)."""
    device = torch.device(device)
    if dtype != torch.bfloat16:
        return f"tinygemm takes bf16 activations only, not {dtypes.name(dtype)}"
    if device.type == "cuda":
        if not hasattr(torch, "_weight_int4pack_mm") or not hasattr(torch, "_convert_weight_to_int4pack"):
            return "this torch has no torch._weight_int4pack_mm"
        if torch.cuda.get_device_capability(device) < (8, 0):
            return "tinygemm's kernel needs compute capability 8.0 or newer"
        return None
    if device.type == "cpu":
        if not hasattr(torch, "_weight_int4pack_mm_for_cpu") or \
                not hasattr(torch, "_convert_weight_to_int4pack_for_cpu"):
            return "this torch has no torch._weight_int4pack_mm_for_cpu"
        return None
    return f"tinygemm does not run on {device.type}"


def tinygemm_weights(packed: torch.Tensor, scales: torch.Tensor, group_size: int,
                     inner_k_tiles: int = TINYGEMM_INNER_K_TILES) -> dict:
    """The int4 weights of ``w4a16_gemv`` (``packed`` (N, K // 2) uint8, float32 ``scales`` (N, K // group_size))
    in tinygemm's format, converted once as a model loader would: ``{"w", "scales_and_zeros", "group_size", "n",
    "k"}``. The scales become bf16 (tinygemm's format), a rounding of at most 2**-9 of each scale."""
    n, k = packed.shape[0], 2 * packed.shape[1]
    if group_size not in (32, 64, 128, 256):
        raise ValueError(f"tinygemm takes groups of 32, 64, 128 or 256, not {group_size!r}")
    if inner_k_tiles not in (2, 4, 8):
        raise ValueError(f"inner_k_tiles must be 2, 4 or 8, not {inner_k_tiles!r}")
    n_mult = 8 if packed.device.type == "cuda" else 16  # the CPU twin takes N in multiples of 16
    if n % n_mult or k % (16 * inner_k_tiles) or k % group_size:
        raise ValueError(f"tinygemm needs N a multiple of {n_mult} and K a multiple of {16 * inner_k_tiles} and of "
                         f"the group; got N = {n}, K = {k}")
    if tuple(scales.shape) != (n, k // group_size):
        raise ValueError(f"scales must have shape ({n}, {k // group_size}); got {tuple(scales.shape)}")
    why = tinygemm_unavailable(torch.bfloat16, packed.device)
    if why:
        raise RuntimeError(why)
    tb = tinygemm_bytes(packed.contiguous())
    if packed.device.type == "cuda":
        w = torch._convert_weight_to_int4pack(tb, inner_k_tiles)
    else:  # the CPU twin takes the values u themselves, int32 (N, K)
        u = torch.stack((tb >> 4, tb & 0x0F), dim=2).reshape(n, k).to(torch.int32)
        w = torch._convert_weight_to_int4pack_for_cpu(u, inner_k_tiles)
    return {"w": w, "scales_and_zeros": tinygemm_scales_and_zeros(scales).to(packed.device),
            "group_size": group_size, "n": n, "k": k}


def tinygemm_mm(x: torch.Tensor, tg: dict) -> torch.Tensor:
    """``x @ W.T`` with tinygemm (x (M, K) bf16; ``tg`` from :func:`tinygemm_weights`) -> (M, N) bf16."""
    x = x.contiguous()
    if x.device.type == "cuda":
        return torch._weight_int4pack_mm(x, tg["w"], tg["group_size"], tg["scales_and_zeros"])
    return torch._weight_int4pack_mm_for_cpu(x, tg["w"], tg["group_size"], tg["scales_and_zeros"])
