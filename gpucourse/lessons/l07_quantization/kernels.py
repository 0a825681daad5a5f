"""Weight-only quantized GEMV/GEMM in Triton: ``y = x @ dequant(W).T`` with bf16 activations and int8 or packed
int4 weights, dequantized in registers and accumulated in float32.

* W8A16 (:func:`w8a16_gemv`): ``q`` int8 (N, K), one float32 scale per output row (N,). The scale is the same for
  a whole row, so it is applied once, to the finished float32 sum.
* W4A16 (:func:`w4a16_gemv`): ``packed`` uint8 (N, K // 2) in :mod:`.packing`'s layout, float32 group scales
  (N, K // group_size). Each group's partial sum is multiplied by its scale before it joins the total.

``x`` is (M, K), bfloat16 or float16; the output is (M, N) in x's dtype. Two code paths:

* *rows* (small M, the decode case): each program owns ``BLOCK_N`` output rows and one row of ``x``; it streams
  its weight rows through registers, multiplies in float32 on the CUDA cores and reduces once at the end. Programs
  that share a weight tile but not a row of ``x`` run next to each other, so for M > 1 the tile comes from L2.
  The int4 one (:func:`w4a16_rows_kernel`) reads 32-bit words of 8 nibbles and takes x from planes that a small
  kernel writes first (:func:`x_planes`, why: above ``x_planes_kernel``).
* *dot* (larger M): tiles of ``BLOCK_M`` rows of x against ``BLOCK_N`` weight rows on tensor cores (``tl.dot`` on
  bf16 operands: the int8/int4 values are exact in bf16, products are exact in float32, the sum is float32).
* *tc* (int4, bf16, on a Hopper GPU (sm_90: H100, H200; :func:`tc_capable`), every M: :func:`w4a16_tc_kernel`):
  the weights as the *A* operand of a tensor-core dot, ``out^T = W @ x^T``, which Hopper's wgmma takes from
  registers, so the dequantized weights never go through shared memory; x^T, padded to 16 columns (up to 64 for
  larger M, in blocks of rows), is the B operand.
  Dequantizing is Marlin's bf16 trick in inline PTX, two weights a LOP3 (+ a shift and an FMA), and several
  programs share each block of rows (split-K). ``benchmarks/explore_quant_tc.py`` measured it against the rows path
  at M = 1 (results/h100-explore-quant-tc2.json; through :func:`w4a16_gemv`, h100-explore-quant-tc3.json),
  ``explore_quant_batch.py`` from M = 1 to 256 and on tile-major weights (:func:`tile_major`, :func:`w4a16_tiled`:
  each program's step one contiguous read; h100-explore-quant-batch.json). Elsewhere (the interpreter by default,
  GPUs other than Hopper, fp16 x, groups of 32) M up to 4 takes the rows path; :func:`w4a16_path` says which path a
  call takes.

The weights dominate the bytes moved (N*K for int8, N*K/2 for int4 against 2*N*K for bf16); at M = 1 the kernel is
memory-bound, so fewer bytes is the speed-up (see :func:`gemv_bytes`), as long as the arithmetic per weight keeps
up: at 4 bits a weight, it is what bounds these kernels on an H100 (``benchmarks/explore_quant_planes.py``). Block
sizes come from :data:`CONFIGS` and can be overridden per call.
"""
from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton (macOS/Windows): the kernels are unavailable, the rest of the lesson is not
    triton = tl = None

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
ACT_DTYPES = (torch.bfloat16, torch.float16)

# Chosen on an H100 by benchmarks/explore_quantization.py (int8, dot paths), explore_quant_inplace.py (int4 rows and
# the rows/dot crossovers; results/h100-explore-quant-inplace-planes.json), explore_quant_tc.py (the tc kernel at
# M = 1) and explore_quant_batch.py (the tc kernel and the int8 dot tiles above M = 16, tile-major weights;
# results/h100-explore-quant-batch.json). The interpreter gets bigger blocks and fewer programs, which is what makes
# it fast.
CONFIGS = {
    "w8_rows": dict(BLOCK_N=8, BLOCK_K=1024, STAGES=3, num_warps=4),
    "w8_dot": dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=4),  # M up to 16
    "w8_dot_wide": dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=4),  # M 17..64
    "w8_dot_big": dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4),  # M above 64
    "w4_rows": dict(BLOCK_N=4, BLOCK_W=128, num_warps=1),
    "w4_dot": dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=3),
    # M up to 16: explore_quant_batch.py's "TB128 BN128 ns3 T4", the fastest tile-major configuration at M = 1 on the
    # three shapes (and explore_quant_tc.py's best for the row layout)
    "w4_tc": dict(BLOCK_N=128, NSTAGE=3, CTAS_PER_SM=4, num_warps=4),
    "w4_tc_wide": dict(MX=64, BLOCK_N=128, NSTAGE=3, CTAS_PER_SM=2, num_warps=4),  # M > 16 (MX: at most 64 columns)
    "w8_rows_max_m": 1,  # M up to this uses the rows path, above it the dot path (crossover measured on the H100)
    "w4_rows_max_m": 4,
    "w4_tc_max_m": 1 << 30,  # every M takes the tc path where it can run (bf16 x, sm_90, group >= 64): it was the
    # fastest int4 path at every M from 1 to 256 (explore_quant_batch.py)
}
CPU_CONFIGS = {
    "w8_rows": dict(BLOCK_N=32, BLOCK_K=256, STAGES=1),
    "w8_dot": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64),
    "w8_dot_wide": dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64),
    "w8_dot_big": dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=64),
    "w4_rows": dict(BLOCK_N=32, BLOCK_W=32),
    "w4_dot": dict(BLOCK_M=16, BLOCK_N=32),
    "w4_tc": dict(BLOCK_N=32, NSTAGE=1, SPLIT=3),
    "w4_tc_wide": dict(MX=32, BLOCK_N=32, NSTAGE=1, SPLIT=2),
    "w8_rows_max_m": 4,
    "w4_rows_max_m": 4,
    "w4_tc_max_m": 0,  # off in the interpreter unless asked for (tc=True): it runs there, slowly, in float32
}


def w8_config_name(m: int, rows: bool) -> str:
    """Which of :data:`CONFIGS`' int8 entries a call with M rows of x uses."""
    if rows:
        return "w8_rows"
    return "w8_dot" if m <= 16 else "w8_dot_wide" if m <= 64 else "w8_dot_big"


def configs() -> dict:
    return CPU_CONFIGS if INTERPRETED else CONFIGS


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

    # The tensor-core int4 GEMV. out^T[BLOCK_N, MX] = W[BLOCK_N, K] @ x^T[K, MX]: the weights are the A operand, which
    # a Hopper wgmma reads from registers, and x^T (MX = 16 columns up to M = 16, those past M zero; up to 64 above,
    # more rows of x in further blocks of MX: a third grid axis) is B, from shared memory. The words are dequantized
    # in the register layout of A itself:
    # * Marlin's bf16 trick: a nibble ORed into the mantissa of the bf16 128 (0x4300) reads 128 + nibble; flipping
    #   its top bit in the same logic op (LOP3: (v & 0x000F000F) ^ 0x43084308) makes it 128 + (q + 8), and one
    #   bf16x2 FMA (v * 1 - 136) leaves q, exact. Each 32-bit register holds two bf16 weights: nibble j of a word in
    #   its low half and nibble j + 4 (16 bits up) in its high half, so one LOP3 (after a shift by 4j) makes two.
    # * In a dot's A operand, a register holds the pair of columns 2c, 2c + 1. So for each j = 0..3 the words of a
    #   group are duplicated into a (BLOCK_N, 2 * words) tile (join with themselves: element 2w + d is word w) and
    #   the asm, handed the pair (pack=2), reads its first element: column 2w + d of A_j is nibble j + 4d of word
    #   w, i.e. weight column 8w + j + 4d. A group is 4 dots, A_j against x's columns in that order (B_j, gathered
    #   from x: no kernel rewrites x first). The asm is *not* elementwise: it is right because each pack is a
    #   column pair of A's register layout (the interpreter, and any GPU without inline PTX, use _int4_pairs's
    #   plain-Triton branch, elementwise; explore_quant_tc.py checked the asm on the H100).
    # * The group's float32 partial (BLOCK_N, MX) is scaled by the group's scales and accumulated in float32.
    # * N / BLOCK_N tiles are too few programs to keep an H100's memory busy (8192 / 128 = 64), so SPLIT programs
    #   share a tile, each over a range of groups; each writes its float32 partial, and the last to finish (a
    #   counter per tile) adds the SPLIT partials in order and writes the output, then zeroes its counter for the
    #   next call (like Marlin's workspace).
    _PAIR_ASM = """{
    .reg .b32 t, one, off;
    mov.b32 one, 0x3F803F80;
    mov.b32 off, 0xC308C308;
    shr.u32 t, $1, SHIFT;
    lop3.b32 t, t, 0x000F000F, 0x43084308, 0x6A;
    fma.rn.bf16x2 $0, t, one, off;
    }"""
    _PAIR_ASM0 = tl.constexpr(_PAIR_ASM.replace("SHIFT", "0"))
    _PAIR_ASM1 = tl.constexpr(_PAIR_ASM.replace("SHIFT", "4"))
    _PAIR_ASM2 = tl.constexpr(_PAIR_ASM.replace("SHIFT", "8"))
    _PAIR_ASM3 = tl.constexpr(_PAIR_ASM.replace("SHIFT", "12"))

    @triton.jit
    def _int4_pairs(ud, J: tl.constexpr, ASM: tl.constexpr):
        """ud (BLOCK_N, 2 * words), element 2w + d = word w -> bf16 q: column 2w + d is nibble J + 4d of word w."""
        if ASM:
            if J == 0:
                return tl.inline_asm_elementwise(_PAIR_ASM0, "=r,r,r", [ud], dtype=tl.bfloat16, is_pure=True, pack=2)
            elif J == 1:
                return tl.inline_asm_elementwise(_PAIR_ASM1, "=r,r,r", [ud], dtype=tl.bfloat16, is_pure=True, pack=2)
            elif J == 2:
                return tl.inline_asm_elementwise(_PAIR_ASM2, "=r,r,r", [ud], dtype=tl.bfloat16, is_pure=True, pack=2)
            else:
                return tl.inline_asm_elementwise(_PAIR_ASM3, "=r,r,r", [ud], dtype=tl.bfloat16, is_pure=True, pack=2)
        else:
            d = (tl.arange(0, ud.shape[1]) % 2)[None, :]
            v = (((ud >> (4 * J + 16 * d)) & 0xF) ^ 8) - 8
            return v.to(tl.float32).to(tl.bfloat16)  # via float32: the interpreter's int32 -> bf16 gives NaN

    @triton.jit
    def _x_pairs(x_ptr, stride_xm, k0, rk, rm, M, J: tl.constexpr):
        """B_J of the group starting at column k0: B_J[2w + d, m] = x[m, k0 + 8w + J + 4d] (zero for m >= M)."""
        return tl.load(x_ptr + rm[None, :] * stride_xm + (k0 + 8 * (rk // 2) + J + 4 * (rk % 2))[:, None],
                       mask=(rm < M)[None, :], other=0.0)

    @triton.jit
    def _tc_dot(a, b, acc, INTERPRETED: tl.constexpr):
        if INTERPRETED:  # the interpreter's bf16 tl.dot is wrong (triton-lang/triton#11584): float32 there, exact
            return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            return tl.dot(a, b, acc)

    @triton.jit
    def _x_group(x_ptr, stride_xm, k0, rk, rm, M):
        """x's four B tiles for the group starting at column k0 (B_J of _x_pairs, J = 0..3)."""
        return (_x_pairs(x_ptr, stride_xm, k0, rk, rm, M, 0), _x_pairs(x_ptr, stride_xm, k0, rk, rm, M, 1),
                _x_pairs(x_ptr, stride_xm, k0, rk, rm, M, 2), _x_pairs(x_ptr, stride_xm, k0, rk, rm, M, 3))

    @triton.jit
    def _group_dot(ud, b0, b1, b2, b3, ASM: tl.constexpr, INTERPRETED: tl.constexpr):
        """One group's float32 partial (BLOCK_N, MX): the duplicated words ud (see _int4_pairs) against x's tiles,
        four dots, one a nibble pair j = 0..3."""
        part = _tc_dot(_int4_pairs(ud, 0, ASM), b0, tl.zeros((ud.shape[0], b0.shape[1]), dtype=tl.float32),
                       INTERPRETED)
        part = _tc_dot(_int4_pairs(ud, 1, ASM), b1, part, INTERPRETED)
        part = _tc_dot(_int4_pairs(ud, 2, ASM), b2, part, INTERPRETED)
        return _tc_dot(_int4_pairs(ud, 3, ASM), b3, part, INTERPRETED)

    @triton.jit
    def _split_k_store(acc, part_ptr, cnt_ptr, out_ptr, pid_n, pid_k, rn, rm, mm, N, stride_om, SPLIT):
        """Write a program's float32 tile ``acc`` (rows ``rn`` of out^T, columns ``rm``; ``mm`` its mask) into out.
        With SPLIT > 1 programs per tile (split-K): store it as partial ``pid_k`` of part_ptr (SPLIT, C, N), then
        count; the last program of the tile adds the SPLIT partials in order (deterministic), writes out, and zeroes
        its counter (cnt_ptr: one a tile, zero on entry) for the next call."""
        C: tl.constexpr = acc.shape[1]
        if SPLIT > 1:
            tl.store(part_ptr + pid_k * (C * N) + rm[None, :] * N + rn[:, None], acc, mask=mm)
            tl.debug_barrier()  # every thread's partial is written before the count
            done = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel")
            if done == SPLIT - 1:  # the last split of this tile
                tot = tl.zeros(acc.shape, dtype=tl.float32)
                for k in range(0, SPLIT):
                    tot += tl.load(part_ptr + k * (C * N) + rm[None, :] * N + rn[:, None], mask=mm, other=0.0,
                                   cache_modifier=".cg")
                tl.store(out_ptr + rm[None, :] * stride_om + rn[:, None], tot.to(out_ptr.dtype.element_ty),
                         mask=mm)
                tl.atomic_xchg(cnt_ptr + pid_n, 0)  # zero again for the next call
        else:
            tl.store(out_ptr + rm[None, :] * stride_om + rn[:, None], acc.to(out_ptr.dtype.element_ty), mask=mm)

    @triton.jit
    def w4a16_tc_kernel(x_ptr, w_ptr, s_ptr, part_ptr, cnt_ptr, out_ptr, M, N, KW, stride_xm, stride_wn, stride_sn,
                        stride_om, GPS, SPLIT, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, MX: tl.constexpr,
                        NSTAGE: tl.constexpr, ASM: tl.constexpr, INTERPRETED: tl.constexpr, TILED: tl.constexpr,
                        TB: tl.constexpr):
        """Program (tile, split, m-block): rows tile * BLOCK_N .., groups split * GPS .. + GPS, rows of x
        m-block * MX .. + MX. w_ptr: int32 words (N, KW) of 8 nibbles, or with TILED the tile-major copy of
        :func:`tile_major` (blocks of TB rows, TB a multiple of BLOCK_N: each block's group a contiguous (TB, words)
        run, the scales (blocks, groups, TB)); part_ptr: float32 (m-blocks, SPLIT, MX, N) partials; cnt_ptr: a
        counter per tile and m-block, zero on entry and exit."""
        WPG: tl.constexpr = GROUP // 8  # words a group
        KP: tl.constexpr = 2 * WPG  # columns of each of a group's 4 dots
        pid_n = tl.program_id(0)
        pid_k = tl.program_id(1)
        pid_m = tl.program_id(2)
        n_groups = KW // WPG
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = rn < N
        rw = tl.arange(0, WPG)
        rk = tl.arange(0, KP)
        rm = tl.arange(0, MX)
        x_blk = x_ptr + pid_m * MX * stride_xm
        m_left = M - pid_m * MX  # rows of x in this block: rm < m_left
        if TILED:  # padded to whole blocks: no mask
            blk = (pid_n * BLOCK_N) // TB
            r0 = (pid_n * BLOCK_N) % TB + tl.arange(0, BLOCK_N)
            w_tile = w_ptr + blk.to(tl.int64) * n_groups * (TB * WPG) + (r0 * WPG)[:, None] + rw[None, :]
            s_tile = s_ptr + blk.to(tl.int64) * n_groups * TB + r0
        else:
            w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
            s_rows = s_ptr + rn.to(tl.int64) * stride_sn
        acc = tl.zeros((BLOCK_N, MX), dtype=tl.float32)
        g0 = pid_k * GPS
        g1 = tl.minimum(g0 + GPS, n_groups)
        # x's tiles for the next group are loaded into registers during this one's dots: Triton does not pipeline
        # these 2-byte gathers (the words and scales it does, through shared memory: NSTAGE)
        b0, b1, b2, b3 = _x_group(x_blk, stride_xm, g0 * GROUP, rk, rm, m_left)
        for g in tl.range(g0, g1, num_stages=NSTAGE):
            if TILED:
                u = tl.load(w_tile + g * (TB * WPG))
                s = tl.load(s_tile + g * TB)
            else:
                u = tl.load(w_rows + (g * WPG + rw)[None, :], mask=n_ok[:, None], other=0)
                s = tl.load(s_rows + g, mask=n_ok, other=0.0)
            ud = tl.reshape(tl.join(u, u), (BLOCK_N, KP))
            kn = tl.minimum(g + 1, g1 - 1) * GROUP  # the last step reloads its own group: in bounds, unused
            c0, c1, c2, c3 = _x_group(x_blk, stride_xm, kn, rk, rm, m_left)
            acc += _group_dot(ud, b0, b1, b2, b3, ASM, INTERPRETED) * s[:, None]
            b0, b1, b2, b3 = c0, c1, c2, c3
        _split_k_store(acc, part_ptr + pid_m * SPLIT * MX * N, cnt_ptr + pid_m * tl.num_programs(0),
                       out_ptr + pid_m * MX * stride_om, pid_n, pid_k, rn, rm,
                       n_ok[:, None] & (rm < m_left)[None, :], N, stride_om, SPLIT)


MAGIC = 0x4B000000  # the bits of the float 2**23 (field_to_float)


def _words(t: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-byte (N, K) tensor, K a multiple of 4, as int32 words (N, K // 4); copied first if its start
    is not 16-byte aligned (a view that begins mid-row, say), which a word view would refuse or load slowly."""
    if t.data_ptr() % 16:
        t = t.clone()
    return t.view(torch.int32)


def x_planes(x: torch.Tensor, per: int) -> torch.Tensor:
    """x (M, K), K a multiple of ``per``, as float32 planes (M, per, K // per): plane j holds x[:, per*w + j]."""
    m, k = x.shape
    out = torch.empty(m, per, k // per, dtype=torch.float32, device=x.device)
    block = 64 if INTERPRETED else 256
    x_planes_kernel[(triton.cdiv(k // per, block), m)](x, out, k // per, x.stride(0), PER=per, BLOCK=block)
    return out


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


def check_group_size(group_size, k: int) -> None:
    """The group sizes the W4A16 kernel takes: a power of two from 32 up that divides K."""
    if not isinstance(group_size, int) or group_size < 32 or group_size & (group_size - 1):
        raise ValueError(f"group_size must be a power of two >= 32 (32, 64, 128, ...), not {group_size!r}")
    if k % group_size:
        raise ValueError(f"group_size {group_size} does not divide K = {k}: every group must be whole")


_COUNTERS: dict = {}


def _tile_counters(device, n: int) -> torch.Tensor:
    """The tc path's split-K counters for this device: int32, zero between calls (each call leaves them zero). One
    buffer a device ("cuda" and "cuda:0" are the same one), so two calls running at once on two streams of a device
    would share it: the lesson's code runs one stream."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    buf = _COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = _COUNTERS[device] = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
    return buf


TC_MAJOR = 9  # Hopper (sm_90: the H100, H200): the one architecture the tc path is built and checked for


def tc_capable(capability) -> bool:
    """Whether a GPU of compute capability ``capability`` ((major, minor)) runs the tc path: Hopper only (major 9).
    The path relies on Hopper's wgmma taking A from registers, and its inline PTX on the register layout Triton gives
    a dot's A operand there (section 4b); a Blackwell GPU (10.x, 12.x) has no wgmma, and on any other architecture
    the layout, and so the pairing of nibbles, is unchecked: such a GPU takes the rows or dot path."""
    return tuple(capability)[0] == TC_MAJOR


def tc_available(x: torch.Tensor, group_size: int) -> bool:
    """Whether the tensor-core int4 path can run for this x: bf16, group >= 64 (a group's dots need K >= 16), and
    Triton's interpreter or a Hopper GPU (compute capability 9.x: :func:`tc_capable`). Any M: x's rows go in blocks
    of up to 16 columns of B at M <= 16, up to ``w4_tc_wide``'s MX above."""
    if triton is None or x.dtype != torch.bfloat16 or group_size < 64:
        return False
    return INTERPRETED or (x.device.type == "cuda" and tc_capable(torch.cuda.get_device_capability(x.device)))


def w4a16_path(x: torch.Tensor, group_size: int) -> str:
    """The path :func:`w4a16_gemv` takes for this x when not told (no ``tc=`` or ``rows=``): "tc" (M up to
    ``w4_tc_max_m`` where :func:`tc_available`), else "rows" (M up to ``w4_rows_max_m``), else "dot"."""
    m, cfg = x.shape[0], configs()
    if m <= cfg["w4_tc_max_m"] and tc_available(x, group_size):
        return "tc"
    return "rows" if m <= cfg["w4_rows_max_m"] else "dot"


def tc_config(m: int, **config) -> dict:
    """The tc path's configuration for M rows of x: ``w4_tc`` (MX = 16 columns of B) up to M = 16, above it
    ``w4_tc_wide`` with MX the next power of two of M up to its MX (then blocks of MX rows); ``config`` overrides."""
    cfg = configs()
    if m <= 16:
        c = dict(cfg["w4_tc"], MX=16)
    else:
        c = dict(cfg["w4_tc_wide"])
        c["MX"] = min(c["MX"], triton.next_power_of_2(m))
    c.update(config)
    if c["MX"] < 16 or c["MX"] & (c["MX"] - 1):
        raise ValueError(f"MX (x's rows a block, B's columns) must be a power of two >= 16, not {c['MX']!r}")
    return c


def split_groups(groups: int, split: int) -> tuple:
    """``(split, per_split)``: at most ``split`` programs share a block of rows (split-K), each over ``per_split``
    whole groups, and none is left without a group (so ``split`` can come back smaller)."""
    split = max(1, min(split, groups))
    per = -(-groups // split)
    return -(-groups // per), per


def tc_split(config: dict, tiles: int, groups: int, device) -> tuple:
    """The tc path's ``(split, groups per split)`` for ``tiles`` blocks of rows (times blocks of x's rows):
    ``config["SPLIT"]``, or else ``CTAS_PER_SM`` programs for each SM of ``device`` (1 SM off the GPU)."""
    if "SPLIT" in config:
        return split_groups(groups, config["SPLIT"])
    sms = torch.cuda.get_device_properties(device).multi_processor_count if torch.device(device).type == "cuda" else 1
    return split_groups(groups, round(config["CTAS_PER_SM"] * sms / tiles))


class TiledInt4:
    """int4 weights re-laid for the tc kernel (:func:`tile_major`): ``words`` int32, blocks of ``block`` rows (N
    padded with zero rows to a whole block), each block's groups one after another, a group's (block, words) tile
    contiguous; ``scales`` float32 (blocks, groups, block). ``n``, ``k``: the weight's shape; ``group_size``."""

    def __init__(self, words, scales, n: int, k: int, group_size: int, block: int):
        self.words, self.scales, self.n, self.k, self.group_size, self.block = words, scales, n, k, group_size, block

    def nbytes(self) -> int:
        return self.words.numel() * 4 + self.scales.numel() * 4


def tile_major(packed: torch.Tensor, scales: torch.Tensor, group_size: int, block: int = 128) -> TiledInt4:
    """The weights of ``w4a16_gemv`` (packed (N, K // 2) uint8, scales (N, K // group_size) float32) in the order
    the tc kernel reads them, done once when a layer is loaded (Marlin and tinygemm pre-pack their weights too): a
    program's step then reads one contiguous run of block * group_size / 2 bytes, and its scales as one run, instead
    of a short piece of each of block rows."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.dim() != 2:
        raise TypeError(f"packed must be a 2-D uint8 tensor (N, K // 2); got "
                        f"{getattr(packed, 'dtype', type(packed).__name__)}")
    n, k = packed.shape[0], 2 * packed.shape[1]
    check_group_size(group_size, k)
    if not isinstance(scales, torch.Tensor) or tuple(scales.shape) != (n, k // group_size) or \
            scales.dtype != torch.float32:
        raise ValueError(f"scales must be float32 of shape ({n}, {k // group_size}); got "
                         f"{getattr(scales, 'dtype', type(scales).__name__)} of shape "
                         f"{tuple(getattr(scales, 'shape', ()))}")
    _same_device(packed=packed, scales=scales)
    if block < 16 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 16, not {block!r}")
    groups, wpg = k // group_size, group_size // 8
    blocks = -(-n // block)
    words = torch.zeros(blocks * block, k // 8, dtype=torch.int32, device=packed.device)
    words[:n] = _words(packed.contiguous())
    sc = torch.zeros(blocks * block, groups, dtype=torch.float32, device=packed.device)
    sc[:n] = scales
    words = words.view(blocks, block, groups, wpg).permute(0, 2, 1, 3).contiguous()
    sc = sc.view(blocks, block, groups).permute(0, 2, 1).contiguous()
    return TiledInt4(words, sc, n, k, group_size, block)


def w4a16_tc(x, words, scales, group_size: int, out, tiled: TiledInt4 = None, **config) -> torch.Tensor:
    """The tensor-core path (:func:`w4a16_tc_kernel`) into ``out`` (M, N): x (M, K) bf16, words int32 (N, K // 8)
    and scales, or ``tiled`` (:func:`tile_major`; words and scales then None). ``config`` (:func:`tc_config`):
    BLOCK_N, MX, NSTAGE, num_warps, and the split: SPLIT, or CTAS_PER_SM (SPLIT chosen so that programs are about
    that many an SM)."""
    m, k = x.shape
    if tiled is not None:
        n, kw, words, scales = tiled.n, tiled.k // 8, tiled.words, tiled.scales
        stride_wn = stride_sn = 0
    else:
        (n, kw), stride_wn, stride_sn = words.shape, words.stride(0), scales.stride(0)
    c = tc_config(m, **config)
    mx, bn = c["MX"], c["BLOCK_N"]
    if tiled is not None and tiled.block % bn:
        raise ValueError(f"BLOCK_N {bn} must divide the tile-major block {tiled.block}")
    tiles, mblocks = triton.cdiv(n, bn), triton.cdiv(m, mx)
    split, gps = tc_split(c, tiles * mblocks, k // group_size, x.device)
    part = torch.empty(mblocks, split, mx, n, dtype=torch.float32, device=x.device) if split > 1 else out
    w4a16_tc_kernel[(tiles, split, mblocks)](
        x, words, scales, part, _tile_counters(x.device, tiles * mblocks), out, m, n, kw, x.stride(0), stride_wn,
        stride_sn, out.stride(0), gps, split, GROUP=group_size, BLOCK_N=bn, MX=mx, NSTAGE=c["NSTAGE"],
        ASM=not INTERPRETED, INTERPRETED=INTERPRETED, TILED=tiled is not None,
        TB=tiled.block if tiled is not None else bn, num_warps=c.get("num_warps", 4))
    return out


def w4a16_tiled(x: torch.Tensor, tiled: TiledInt4, **config) -> torch.Tensor:
    """``w4a16_gemv`` on weights made tile-major by :func:`tile_major`, on the tc path (bf16 x, a Hopper GPU or the
    interpreter)."""
    _need_triton()
    if not isinstance(tiled, TiledInt4):
        raise TypeError(f"tiled must come from tile_major(packed, scales, group_size), not {type(tiled).__name__}")
    _check_x(x, tiled.k, what="the tile-major weight")
    if not tc_available(x, tiled.group_size):
        raise ValueError("tile-major weights run on the tensor-core path only: bf16 x, group_size >= 64, and "
                         "Triton's interpreter or a Hopper GPU (sm_90)")
    _same_device(x=x, words=tiled.words)
    x = x.contiguous()
    out = torch.empty(x.shape[0], tiled.n, dtype=x.dtype, device=x.device)
    return w4a16_tc(x, None, None, tiled.group_size, out, tiled=tiled, **config)


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
                           scales.stride(0), out.stride(0), GROUP=group_size, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"],
                           INTERPRETED=INTERPRETED, **warps)
    return out


def reference_gemv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The exact answer, for checks: float64 ``x @ w.T`` rounded once to x's dtype (``w`` the dequantized float
    weights)."""
    return (x.to(torch.float64) @ w.to(torch.float64).T).to(x.dtype)
