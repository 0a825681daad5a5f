"""The Hopper tensor-core path of lesson 07's int4 GEMV (its "Going further" section): :func:`w4a16_tc_kernel`.

The weights are the *A* operand of a tensor-core dot, ``out^T = W @ x^T``, which Hopper's wgmma takes from registers,
so the dequantized weights never go through shared memory; x^T, padded to 16 columns (up to 64 for larger M, in
blocks of rows), is the B operand. Dequantizing is Marlin's bf16 trick in inline PTX, two weights a LOP3 (+ a shift
and an FMA), and several programs share each block of rows (split-K, with a counter per tile). :func:`tile_major`
lays the weights out once so that each program's step is one contiguous read (:func:`w4a16_tiled`).

It runs for bf16 x, groups of 64 or more, on a Hopper GPU (sm_90: H100, H200; :func:`tc_capable`) or in Triton's
interpreter; :func:`kernels.w4a16_gemv` takes it by default where it can (:func:`kernels.w4a16_path`). Its
measurements against the rows path are logged in ``lab/README.md``.
"""
from __future__ import annotations

import torch

from .block_sizes import INTERPRETED, configs
from .common import _check_x, _need_triton, _same_device, _words, check_group_size

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton (macOS/Windows): the kernels are unavailable, the rest of the lesson is not
    triton = tl = None


if triton is not None:
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
    #   plain-Triton branch, elementwise; the asm was checked on the H100: lab/README.md).
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
    a dot's A operand there (the lesson's "Going further" section); a Blackwell GPU (10.x, 12.x) has no wgmma, and
    on any other architecture the layout, and so the pairing of nibbles, is unchecked: such a GPU takes the rows or
    dot path."""
    return tuple(capability)[0] == TC_MAJOR


def tc_available(x: torch.Tensor, group_size: int) -> bool:
    """Whether the tensor-core int4 path can run for this x: bf16, group >= 64 (a group's dots need K >= 16), and
    Triton's interpreter or a Hopper GPU (compute capability 9.x: :func:`tc_capable`). Any M: x's rows go in blocks
    of up to 16 columns of B at M <= 16, up to ``w4_tc_wide``'s MX above."""
    if triton is None or x.dtype != torch.bfloat16 or group_size < 64:
        return False
    return INTERPRETED or (x.device.type == "cuda" and tc_capable(torch.cuda.get_device_capability(x.device)))


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
