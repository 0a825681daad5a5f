"""Weight-only quantized GEMV/GEMM in Triton: ``y = x @ dequant(W).T`` with bf16 activations and int8 or packed
int4 weights, dequantized in registers and accumulated in float32.

* W8A16 (:func:`w8a16_gemv`): ``q`` int8 (N, K), one float32 scale per output row (N,). The scale is the same for
  a whole row, so it is applied once, to the finished float32 sum.
* W4A16 (:func:`w4a16_gemv`): ``packed`` uint8 (N, K // 2) in :mod:`.packing`'s layout, float32 group scales
  (N, K // group_size). Each group's partial sum is multiplied by its scale before it joins the total.

``x`` is (M, K), bfloat16 or float16; the output is (M, N) in x's dtype. The paths:

* *rows* (small M, the decode case): each program owns ``BLOCK_N`` output rows and one row of ``x``; it streams
  its weight rows through registers, multiplies in float32 on the CUDA cores and reduces once at the end. Programs
  that share a weight tile but not a row of ``x`` run next to each other, so for M > 1 the tile comes from L2.
  The int4 one (:func:`w4a16_rows_kernel`) reads 32-bit words of 8 nibbles and takes x from planes that a small
  kernel writes first (:func:`x_planes`, why: above ``x_planes_kernel``).
* *dot* (larger M): tiles of ``BLOCK_M`` rows of x against ``BLOCK_N`` weight rows on tensor cores (``tl.dot`` on
  bf16 operands: the int8/int4 values are exact in bf16, products are exact in float32, the sum is float32).
* *tc* (int4, bf16 x, a Hopper GPU): :mod:`.tensorcore`, the weights as a tensor-core operand from registers, where
  :func:`w4a16_gemv` takes it by default; :func:`w4a16_path` says which path a call takes.

The weights dominate the bytes moved (N*K for int8, N*K/2 for int4 against 2*N*K for bf16); at M = 1 the kernel is
memory-bound, so fewer bytes is the speed-up (see :func:`gemv_bytes`), as long as the arithmetic per weight keeps
up. Block sizes come from :mod:`.block_sizes` (:data:`CONFIGS`) and can be overridden per call.
"""
from __future__ import annotations

import torch

from .block_sizes import CONFIGS, CPU_CONFIGS, INTERPRETED, configs, w8_config_name  # noqa: F401 (re-exported)
from .common import ACT_DTYPES, _check_x, _need_triton, _same_device, _words, check_group_size  # noqa: F401
from .tensorcore import (TC_MAJOR, TiledInt4, split_groups, tc_available, tc_capable, tc_config,  # noqa: F401
                         tc_split, tile_major, w4a16_tc, w4a16_tiled)
from .tensorcore import _COUNTERS, _tile_counters  # noqa: F401 (the tc path's split-K counters, for tests)

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton (macOS/Windows): the kernels are unavailable, the rest of the lesson is not
    triton = tl = None

if triton is not None:  # the tc path's jit helpers, importable from here too
    from .tensorcore import (_PAIR_ASM, _group_dot, _int4_pairs, _split_k_store, _tc_dot, _x_group,  # noqa: F401
                             _x_pairs, w4a16_tc_kernel)


def gemv_bytes(m: int, n: int, k: int, weight: str, group_size: int = 128) -> int:
    """The least bytes a weight-only GEMM must move: weights (+ scales), x read once, y written once (bf16 x, y)."""
    io = 2 * m * k + 2 * m * n
    if weight == "bf16":
        return 2 * n * k + io
    if weight == "int8":
        return n * k + 4 * n + io
    if weight == "int4":
        return n * k // 2 + 4 * n * (k // group_size) + io
    raise ValueError(f"weight must be 'bf16', 'int8' or 'int4', not {weight!r}")


if triton is not None:
    # int -> float without the conversion instruction. An H100 SM converts integers to floats at 16 results per
    # clock (CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table, compute capability 9.0) against
    # 128 FP32 adds or multiply-adds. OR a non-negative integer u < 2**23 into the mantissa of the float
    # 2**23 (bits 0x4B000000) and the float's value is 2**23 + u: one logic op, and one subtraction removes the
    # 2**23 and the offset that made u non-negative. Exact for every int8 and int4 value.
    @triton.jit
    def int8_to_float(w):
        """int8 tile -> float32: the byte plus 128 (XOR of the sign bit) in the mantissa of 2**23, minus 2**23+128."""
        return ((w.to(tl.int32) & 0xFF) ^ 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0

    # The int4 M = 1 kernel reads the weights as 32-bit words of 8 nibbles and takes every value out of its word in
    # place: the field at bit P is ANDed out and ORed into the mantissa of the float 2**(23 - P), whose
    # last mantissa place is then worth 2**-P, so the float is 2**(23 - P) + u exactly (u: the field, 0..2**bits - 1,
    # P + bits <= 23); one subtraction of 2**(23 - P) + offset leaves the signed value. Per weight: one logic op, one
    # subtraction, one multiply-add. MAGIC (0x4B000000, the bits of 2**23) is an argument, not a constant, so the
    # compiler keeps the exponents in registers and the masks are immediates of the logic op (written as
    # constants, ptxas holds the masks in registers instead and reloads them when registers run short).
    @triton.jit
    def field_to_float(v, P: tl.constexpr, BITS: tl.constexpr, MAGIC):
        """The BITS-bit field of v at bit P, in offset binary (value + 2**(BITS-1)), as its float32 value."""
        MASK: tl.constexpr = ((1 << BITS) - 1) << P
        C: tl.constexpr = float((1 << (23 - P)) + (1 << (BITS - 1)))
        return ((v & MASK) | (MAGIC - (P << 23))).to(tl.float32, bitcast=True) - C

    # x in planes. Word w of a weight row holds columns PER*w .. PER*w + PER-1, so the GEMV multiplies field j of
    # every word by x[PER*w + j]: a stride-PER gather. Loaded that way, x gets a layout of its own, and Triton moves
    # it through shared memory into the words' layout at every step of the loop (Triton 3.6, the course H100's:
    # shared-memory traffic and 127-160 registers a thread, measured 28-31 µs for 8192 x 8192 int4, issue-bound). So
    # x is first rewritten as PER planes of float32, plane j holding x[PER*w + j] (M * K * 4 bytes, one small
    # kernel): every load in the GEMV's loop is then contiguous along the words and shares their layout.
    @triton.jit
    def x_planes_kernel(x_ptr, out_ptr, KW, stride_xm, PER: tl.constexpr, BLOCK: tl.constexpr):
        m = tl.program_id(1)
        w = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = (w < KW)[:, None]
        j = tl.arange(0, PER)[None, :]
        xx = tl.load(x_ptr + m * stride_xm + PER * w[:, None] + j, mask=ok, other=0.0)
        tl.store(out_ptr + m * PER * KW + j * KW + w[:, None], xx.to(tl.float32), mask=ok)

    @triton.jit
    def w4a16_step(u, s, xp, ww, k_ok, KW, MAGIC):
        """One step of the int4 rows kernel: words u (BLOCK_N, BLOCK_W), their group scales s, x planes at ww."""
        lo = u ^ -2004318072  # 0x88888888: every nibble becomes q + 8, 0..15
        hi = lo >> 12  # nibbles 5, 6, 7 (bits 20..31) to bits 8..19; nibbles 0..4 are used in place
        part = field_to_float(lo, 0, 4, MAGIC) * tl.load(xp + ww, mask=k_ok, other=0.0)[None, :]
        part += field_to_float(lo, 4, 4, MAGIC) * tl.load(xp + KW + ww, mask=k_ok, other=0.0)[None, :]
        part += field_to_float(lo, 8, 4, MAGIC) * tl.load(xp + 2 * KW + ww, mask=k_ok, other=0.0)[None, :]
        part += field_to_float(lo, 12, 4, MAGIC) * tl.load(xp + 3 * KW + ww, mask=k_ok, other=0.0)[None, :]
        part += field_to_float(lo, 16, 4, MAGIC) * tl.load(xp + 4 * KW + ww, mask=k_ok, other=0.0)[None, :]
        part += field_to_float(hi, 8, 4, MAGIC) * tl.load(xp + 5 * KW + ww, mask=k_ok, other=0.0)[None, :]
        part += field_to_float(hi, 12, 4, MAGIC) * tl.load(xp + 6 * KW + ww, mask=k_ok, other=0.0)[None, :]
        part += field_to_float(hi, 16, 4, MAGIC) * tl.load(xp + 7 * KW + ww, mask=k_ok, other=0.0)[None, :]
        return part * s  # a word's 8 columns share one group (GROUP >= 32): its scale, in float32

    @triton.jit
    def w4a16_rows_kernel(xp_ptr, w_ptr, s_ptr, out_ptr, N, KW, stride_wn, stride_sn, stride_om, MAGIC,
                          GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr):
        """The int4 twin: w_ptr int32 words of 8 nibbles (nibble j of word w at bits 4j: column 8w + j), one scale
        per GROUP columns (GROUP // 8 words); xp_ptr: x in 8 planes. The next step's words and scales are loaded
        before this step's arithmetic (a double buffer in registers), so they are on their way meanwhile."""
        WPG: tl.constexpr = GROUP // 8
        m = tl.program_id(0)
        rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
        s_rows = s_ptr + rn.to(tl.int64)[:, None] * stride_sn
        xp = xp_ptr + m * 8 * KW
        n_ok = (rn < N)[:, None]
        ww = tl.arange(0, BLOCK_W)
        k_ok = ww < KW
        u = tl.load(w_rows + ww[None, :], mask=n_ok & k_ok[None, :], other=0)
        s = tl.load(s_rows + (ww // WPG)[None, :], mask=n_ok & k_ok[None, :], other=0.0)
        acc = tl.zeros((BLOCK_N, BLOCK_W), dtype=tl.float32)
        for w0 in range(0, KW, BLOCK_W):
            w_next = ww + BLOCK_W
            ok_next = w_next < KW
            u_next = tl.load(w_rows + w_next[None, :], mask=n_ok & ok_next[None, :], other=0)
            s_next = tl.load(s_rows + (w_next // WPG)[None, :], mask=n_ok & ok_next[None, :], other=0.0)
            acc += w4a16_step(u, s, xp, ww, k_ok, KW, MAGIC)
            u, s, ww, k_ok = u_next, s_next, w_next, ok_next
        tl.store(out_ptr + m * stride_om + rn, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=rn < N)

    @triton.jit
    def w8a16_kernel(x_ptr, q_ptr, s_ptr, out_ptr, M, N, K, stride_xm, stride_qn, stride_om,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
                     EVEN_K: tl.constexpr, INTERPRETED: tl.constexpr, STAGES: tl.constexpr = 1):
        pid_m = tl.program_id(0)  # fastest-varying: programs that share a weight tile run side by side
        rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = rn < N
        rk = tl.arange(0, BLOCK_K)
        q_rows = q_ptr + rn.to(tl.int64)[:, None] * stride_qn
        s = tl.load(s_ptr + rn, mask=n_ok, other=0.0)
        if DOT:
            rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            m_ok = rm < M
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                kk = k0 + rk
                if EVEN_K:
                    w = tl.load(q_rows + kk[None, :], mask=n_ok[:, None], other=0)
                    x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=m_ok[:, None], other=0.0)
                else:
                    w = tl.load(q_rows + kk[None, :], mask=n_ok[:, None] & (kk < K)[None, :], other=0)
                    x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :],
                                mask=m_ok[:, None] & (kk < K)[None, :], other=0.0)
                if INTERPRETED:  # the interpreter's bf16 tl.dot is wrong (triton-lang/triton#11584): float32 there
                    acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
                else:  # int8 -> bf16 is exact (|q| <= 127 needs 7 bits), products exact, sum in float32
                    acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
            y = acc * s[None, :]
            tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], y.to(out_ptr.dtype.element_ty),
                     mask=m_ok[:, None] & n_ok[None, :])
        else:
            x_row = x_ptr + pid_m * stride_xm
            acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
            for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):  # STAGES: loads issued that many steps ahead
                kk = k0 + rk
                if EVEN_K:
                    w = tl.load(q_rows + kk[None, :], mask=n_ok[:, None], other=0)
                    x = tl.load(x_row + kk)
                else:
                    w = tl.load(q_rows + kk[None, :], mask=n_ok[:, None] & (kk < K)[None, :], other=0)
                    x = tl.load(x_row + kk, mask=kk < K, other=0.0)
                acc += int8_to_float(w) * x.to(tl.float32)[None, :]
            y = tl.sum(acc, axis=1) * s
            tl.store(out_ptr + pid_m * stride_om + rn, y.to(out_ptr.dtype.element_ty), mask=n_ok)

    @triton.jit
    def w4a16_dot_kernel(x_ptr, p_ptr, s_ptr, out_ptr, M, N, K, stride_xm, stride_pn, stride_sn, stride_om,
                         GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRETED: tl.constexpr):
        """The tensor-core path (M above the rows path's range): a group of columns per step, its even and odd
        columns as two dots, the group's scale applied to their float32 sum."""
        HALF: tl.constexpr = GROUP // 2  # bytes per group and row
        n_groups = K // GROUP
        pid_m = tl.program_id(0)
        rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = rn < N
        rj = tl.arange(0, HALF)
        p_rows = p_ptr + rn.to(tl.int64)[:, None] * stride_pn
        s_rows = s_ptr + rn.to(tl.int64) * stride_sn
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = rm < M
        x_rows = x_ptr + rm[:, None] * stride_xm
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for g in range(0, n_groups):
            byte = g * HALF + rj
            b = tl.load(p_rows + byte[None, :], mask=n_ok[:, None], other=0).to(tl.int32)  # (BN, HALF)
            lo = (b << 28) >> 28  # q[:, 2j]: sign-extended low nibble
            hi = b >> 4  # q[:, 2j+1]: arithmetic shift keeps the sign
            xe = tl.load(x_rows + 2 * byte[None, :], mask=m_ok[:, None], other=0.0)  # x[:, 2j]
            xo = tl.load(x_rows + 2 * byte[None, :] + 1, mask=m_ok[:, None], other=0.0)  # x[:, 2j+1]
            if INTERPRETED:
                part = tl.dot(xe.to(tl.float32), tl.trans(lo.to(tl.float32)), input_precision="ieee")
                part = tl.dot(xo.to(tl.float32), tl.trans(hi.to(tl.float32)), part, input_precision="ieee")
            else:
                part = tl.dot(xe, tl.trans(lo.to(xe.dtype)))
                part = tl.dot(xo, tl.trans(hi.to(xo.dtype)), part)
            s = tl.load(s_rows + g, mask=n_ok, other=0.0)
            acc += part * s[None, :]
        tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=m_ok[:, None] & n_ok[None, :])


MAGIC = 0x4B000000  # the bits of the float 2**23 (field_to_float)


def x_planes(x: torch.Tensor, per: int) -> torch.Tensor:
    """x (M, K), K a multiple of ``per``, as float32 planes (M, per, K // per): plane j holds x[:, per*w + j]."""
    m, k = x.shape
    out = torch.empty(m, per, k // per, dtype=torch.float32, device=x.device)
    block = 64 if INTERPRETED else 256
    x_planes_kernel[(triton.cdiv(k // per, block), m)](x, out, k // per, x.stride(0), PER=per, BLOCK=block)
    return out


def w8a16_gemv(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, **config) -> torch.Tensor:
    """``x @ (q * scale[:, None]).T`` for x (M, K) bf16/fp16, q (N, K) int8, scale (N,) float32 -> (M, N) in x's
    dtype. ``config`` overrides :data:`CONFIGS` (``rows=True/False``, block sizes, ``num_warps``, ``num_stages``)."""
    _need_triton()
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.dim() != 2:
        raise TypeError(f"q must be a 2-D int8 tensor (N, K); got {getattr(q, 'dtype', type(q).__name__)} of "
                        f"shape {tuple(getattr(q, 'shape', ()))}")
    n, k = q.shape
    _check_x(x, k)
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32 or tuple(scale.shape) != (n,):
        raise ValueError(f"scale must be float32 of shape ({n},), one per row of q; got "
                         f"{getattr(scale, 'dtype', type(scale).__name__)} of shape "
                         f"{tuple(getattr(scale, 'shape', ()))}")
    _same_device(x=x, q=q, scale=scale)
    x, q, scale = x.contiguous(), q.contiguous(), scale.contiguous()
    m = x.shape[0]
    cfg = configs()
    rows = config.pop("rows", m <= cfg["w8_rows_max_m"])
    c = dict(cfg[w8_config_name(m, rows)], **config)
    warps = {key: c.pop(key) for key in ("num_warps", "num_stages") if key in c}
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    block_m = 1 if rows else c["BLOCK_M"]
    grid = (m if rows else triton.cdiv(m, block_m), triton.cdiv(n, c["BLOCK_N"]))
    w8a16_kernel[grid](x, q, scale, out, m, n, k, x.stride(0), q.stride(0), out.stride(0),
                       BLOCK_M=block_m, BLOCK_N=c["BLOCK_N"], BLOCK_K=c["BLOCK_K"], DOT=not rows,
                       EVEN_K=k % c["BLOCK_K"] == 0, INTERPRETED=INTERPRETED, STAGES=c.get("STAGES", 1), **warps)
    return out


def w4a16_path(x: torch.Tensor, group_size: int) -> str:
    """The path :func:`w4a16_gemv` takes for this x when not told (no ``tc=`` or ``rows=``): "tc" (M up to
    ``w4_tc_max_m`` where :func:`tc_available`), else "rows" (M up to ``w4_rows_max_m``), else "dot"."""
    m, cfg = x.shape[0], configs()
    if m <= cfg["w4_tc_max_m"] and tc_available(x, group_size):
        return "tc"
    return "rows" if m <= cfg["w4_rows_max_m"] else "dot"


def w4a16_gemv(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int,
               **config) -> torch.Tensor:
    """``x @ W.T`` where ``W[n, k] = int4(packed)[n, k] * scales[n, k // group_size]``: x (M, K) bf16/fp16, packed
    (N, K // 2) uint8, scales (N, K // group_size) float32 -> (M, N) in x's dtype. ``config``: ``tc=True/False``
    (the tensor-core path; by default where :func:`tc_available` and M <= ``w4_tc_max_m``), ``rows=True/False``,
    block sizes."""
    _need_triton()
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.dim() != 2:
        raise TypeError(f"packed must be a 2-D uint8 tensor (N, K // 2); got "
                        f"{getattr(packed, 'dtype', type(packed).__name__)} of shape "
                        f"{tuple(getattr(packed, 'shape', ()))}")
    n, k = packed.shape[0], 2 * packed.shape[1]
    _check_x(x, k, what="packed (2 values per byte)")
    check_group_size(group_size, k)
    if not isinstance(scales, torch.Tensor) or scales.dtype != torch.float32 or \
            tuple(scales.shape) != (n, k // group_size):
        raise ValueError(f"scales must be float32 of shape ({n}, {k // group_size}) (rows, K // group_size); got "
                         f"{getattr(scales, 'dtype', type(scales).__name__)} of shape "
                         f"{tuple(getattr(scales, 'shape', ()))}")
    _same_device(x=x, packed=packed, scales=scales)
    x, packed, scales = x.contiguous(), packed.contiguous(), scales.contiguous()
    m = x.shape[0]
    cfg = configs()
    tc = config.pop("tc", None)
    if tc is None:
        tc = "rows" not in config and w4a16_path(x, group_size) == "tc"
    elif tc and not tc_available(x, group_size):
        raise ValueError("the tensor-core path (tc=True) needs bf16 x, group_size >= 64, and Triton's "
                         "interpreter or a Hopper GPU (sm_90)")
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if tc:
        return w4a16_tc(x, _words(packed), scales, group_size, out, **config)
    rows = config.pop("rows", m <= cfg["w4_rows_max_m"])
    c = dict(cfg["w4_rows" if rows else "w4_dot"], **config)
    warps = {key: c.pop(key) for key in ("num_warps", "num_stages") if key in c}
    if rows:
        words = _words(packed)
        w4a16_rows_kernel[(m, triton.cdiv(n, c["BLOCK_N"]))](
            x_planes(x, 8), words, scales, out, n, words.shape[1], words.stride(0), scales.stride(0), out.stride(0),
            MAGIC, GROUP=group_size, BLOCK_N=c["BLOCK_N"], BLOCK_W=c["BLOCK_W"], **warps)
        return out
    grid = (triton.cdiv(m, c["BLOCK_M"]), triton.cdiv(n, c["BLOCK_N"]))
    w4a16_dot_kernel[grid](x, packed.view(torch.int8), scales, out, m, n, k, x.stride(0), packed.stride(0),
                           scales.stride(0), out.stride(0), GROUP=group_size, BLOCK_M=c["BLOCK_M"],
                           BLOCK_N=c["BLOCK_N"], INTERPRETED=INTERPRETED, **warps)
    return out


def reference_gemv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The exact answer, for checks: float64 ``x @ w.T`` rounded once to x's dtype (``w`` the dequantized float
    weights)."""
    return (x.to(torch.float64) @ w.to(torch.float64).T).to(x.dtype)
