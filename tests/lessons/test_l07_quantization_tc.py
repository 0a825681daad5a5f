"""Lesson 07's tensor-core int4 GEMV (tensorcore.w4a16_tc_kernel, ``w4a16_gemv(..., tc=True)``) against the exact
product: in Triton's interpreter in CPU mode (its plain-Triton dequantization), on the GPU with the `gpu` marker (the
inline-PTX one, on a Hopper GPU: compute capability 9.x). Its H100 timings are logged in lab/README.md."""
from __future__ import annotations

import pytest
import torch

import gpucourse
from gpucourse.quant import block_sizes, kernels, packing, symmetric, tensorcore

DEV = gpucourse.torch_device()


def _case(m, n, k, gs, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    q, s = symmetric.quantize(w, 4, "group", gs)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    exact = x.double() @ (q.double() * s.double().repeat_interleave(gs, dim=1)).T
    return x.to(DEV), packing.pack_int4(q).to(DEV), s.to(DEV), exact


@pytest.mark.parametrize("m,n,k,gs,split", [(1, 77, 384, 128, 2), (1, 40, 256, 128, 1), (3, 45, 640, 128, 3),
                                             (16, 33, 512, 64, 5), (1, 50, 512, 256, 2)])
def test_tc_path_matches_the_exact_product(m, n, k, gs, split):
    if not kernels.tc_available(torch.empty(m, k, dtype=torch.bfloat16, device=DEV), gs):
        pytest.skip("the tensor-core path needs Triton's interpreter or a Hopper GPU (compute capability 9.x)")
    x, p, s, exact = _case(m, n, k, gs)
    cfg = {} if gpucourse.on_gpu() else {"BLOCK_N": 32}  # N not a multiple of the block in every case
    y = kernels.w4a16_gemv(x, p, s, gs, tc=True, SPLIT=split, **cfg)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    err = (y.double().cpu() - exact).abs().max() / exact.abs().max()
    assert float(err) < 8e-3  # one bf16 rounding of the output (2**-8 of the largest) and float32 sums
    again = kernels.w4a16_gemv(x, p, s, gs, tc=True, SPLIT=split, **cfg)  # the split-K counters were left zero
    assert torch.equal(y, again)
    rows = kernels.w4a16_gemv(x, p, s, gs, tc=False)  # the rows/dot paths: the same answer, within an ulp or so
    assert float((rows.double() - y.double()).abs().max() / exact.abs().max()) < 8e-3


def test_tc_path_is_refused_where_it_cannot_run():
    x, p, s, _ = _case(1, 8, 128, 32)
    with pytest.raises(ValueError, match="tensor-core path"):
        kernels.w4a16_gemv(x, p, s, 32, tc=True)  # group 32: a group's dots would have K = 8
    x16 = x.to(torch.float16)
    with pytest.raises(ValueError, match="tensor-core path"):
        kernels.w4a16_gemv(x16, p, s, 32, tc=True)
    assert kernels.w4a16_gemv(x16, p, s, 32).dtype == torch.float16  # the default picks another path


def test_tc_path_is_gated_to_hopper_exactly(monkeypatch):
    """The tc path (wgmma with A from registers, inline PTX that relies on Triton's register layout of a dot's A
    operand) runs on Hopper only: compute capability 9.x. A Blackwell GPU (10.x, 12.x, no wgmma) or an Ampere/Ada one
    takes the rows or dot path. Checked with a faked capability: the gate reads torch.cuda.get_device_capability."""
    import types

    assert [kernels.tc_capable(c) for c in ((9, 0), (9, 1), (8, 0), (8, 9), (10, 0), (12, 0), (7, 5))] == \
        [True, True, False, False, False, False, False]
    for module in (block_sizes, tensorcore):  # the configuration table and the tc gate each read it
        monkeypatch.setattr(module, "INTERPRETED", False)
    x = types.SimpleNamespace(dtype=torch.bfloat16, device=torch.device("cuda", 0), shape=(1, 256))
    for cap, want in (((9, 0), True), ((10, 0), False), ((12, 0), False), ((8, 0), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, cap=cap: cap)
        assert kernels.tc_available(x, 128) is want, cap
        assert kernels.w4a16_path(x, 128) == ("tc" if want else "rows"), cap
    assert kernels.tc_available(types.SimpleNamespace(dtype=torch.float16, device=x.device), 128) is False


@pytest.mark.gpu
def test_gpu_tc_path_large_shape_matches_the_rows_path():
    if not kernels.tc_available(torch.empty(1, 4096, dtype=torch.bfloat16, device=DEV), 128):
        pytest.skip("needs a Hopper GPU (compute capability 9.x)")
    x, p, s, exact = _case(1, 4099, 4096, 128)
    y = kernels.w4a16_gemv(x, p, s, 128, tc=True)  # the H100 configuration: BLOCK_N 128, split-K
    assert float((y.double().cpu() - exact).abs().max() / exact.abs().max()) < 8e-3
    assert torch.equal(y, kernels.w4a16_gemv(x, p, s, 128, tc=True))


# --- any M: x in blocks of MX rows; tile-major weights; the int8 configs by M ----------------------------------------

def _needs_tc(m, k, gs):
    if not kernels.tc_available(torch.empty(m, k, dtype=torch.bfloat16, device=DEV), gs):
        pytest.skip("the tensor-core path needs Triton's interpreter or a Hopper GPU (compute capability 9.x)")


def _rel_err(y, exact):
    return float((y.double().cpu() - exact).abs().max() / exact.abs().max())


def _counters_are_zero(device):
    assert device in kernels._COUNTERS  # the call's own buffer (keyed by x.device: cuda:0, not DEV's cuda)
    return int(kernels._tile_counters(device, 1).count_nonzero()) == 0


def test_tc_config_picks_the_x_block_by_m():
    cfg = kernels.configs()
    for m in (1, 5, 16):
        assert kernels.tc_config(m) == dict(cfg["w4_tc"], MX=16)
    wide = cfg["w4_tc_wide"]
    for m, pow2 in ((17, 32), (20, 32), (32, 32), (33, 64), (40, 64), (64, 64), (70, 128), (1000, 1024)):
        assert kernels.tc_config(m) == dict(wide, MX=min(wide["MX"], pow2)), m
    c = kernels.tc_config(20, MX=16, SPLIT=5, BLOCK_N=64)  # overrides win
    assert (c["MX"], c["SPLIT"], c["BLOCK_N"]) == (16, 5, 64)
    if not gpucourse.on_gpu():  # the interpreter's configuration, which the tests below rely on
        assert kernels.CPU_CONFIGS["w4_tc_wide"] == dict(MX=32, BLOCK_N=32, NSTAGE=1, SPLIT=2)
        assert [kernels.tc_config(m)["MX"] for m in (16, 17, 20, 40, 70)] == [16, 32, 32, 32, 32]
        assert [-(-m // kernels.tc_config(m)["MX"]) for m in (20, 40, 70)] == [1, 2, 3]  # m-blocks


@pytest.mark.parametrize("m,n,k,gs,split", [(20, 45, 384, 64, 1), (20, 33, 512, 128, 3), (40, 77, 512, 128, 2),
                                             (40, 51, 256, 64, 1), (70, 33, 768, 256, 3), (70, 45, 512, 256, 1)])
def test_tc_path_over_several_x_blocks_matches_the_exact_product(m, n, k, gs, split):
    _needs_tc(m, k, gs)
    x, p, s, exact = _case(m, n, k, gs, seed=m + n)
    y = kernels.w4a16_gemv(x, p, s, gs, tc=True, SPLIT=split)  # the wide config: MX 32 in the interpreter
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    assert _rel_err(y, exact) < 8e-3
    # every row is right, the last m-block's few rows too (not just the largest elements)
    row_err = (y.double().cpu() - exact).abs().amax(dim=1) / exact.abs().amax(dim=1)
    assert float(row_err.max()) < 1.6e-2, row_err
    assert _counters_are_zero(y.device)  # the last program of each (tile, m-block) zeroed its counter
    assert torch.equal(y, kernels.w4a16_gemv(x, p, s, gs, tc=True, SPLIT=split))


def test_tc_x_block_equals_its_rows_alone():
    """Rows 32..39 of an M = 40 call (its second m-block of MX = 32) are those of a call on x[32:40] alone with the
    same configuration, bit for bit: the block's offset is right and its missing rows are zero."""
    m, n, k, gs = 40, 37, 256, 64
    _needs_tc(m, k, gs)
    x, p, s, exact = _case(m, n, k, gs, seed=7)
    cfg = dict(MX=32, BLOCK_N=kernels.tc_config(m)["BLOCK_N"], SPLIT=2)  # MX 32 on the GPU too: two m-blocks
    y = kernels.w4a16_gemv(x, p, s, gs, tc=True, **cfg)
    tail = kernels.w4a16_gemv(x[32:], p, s, gs, tc=True, **cfg)
    assert tail.shape == (8, n)
    assert torch.equal(y[32:], tail)
    assert _rel_err(tail, exact[32:]) < 8e-3
    assert not torch.equal(y[:8], tail)  # a different block of x gives a different answer


@pytest.mark.parametrize("m,n,k,gs,ratio,split", [(40, 77, 512, 128, 1, 2), (70, 45, 256, 64, 2, 1),
                                                   (20, 130, 384, 128, 2, 3), (3, 50, 512, 256, 1, 2)])
def test_tiled_is_bit_identical_to_the_row_layout(m, n, k, gs, ratio, split):
    """The tile-major copy gives the row layout's output bit for bit with the same config: block = BLOCK_N (a
    program per block) and 2 * BLOCK_N (a program per half block), N not a multiple of the block, several
    m-blocks (the interpreter's MX is 32) and one (M = 3)."""
    _needs_tc(m, k, gs)
    x, p, s, exact = _case(m, n, k, gs, seed=3 * m + n)
    bn = kernels.tc_config(m)["BLOCK_N"]
    block = ratio * bn
    assert n % block
    tiled = kernels.tile_major(p, s, gs, block=block)
    nb = -(-n // block)
    assert (tiled.n, tiled.k, tiled.group_size, tiled.block) == (n, k, gs, block)
    assert tiled.words.shape == (nb, k // gs, block, gs // 8) and tiled.words.dtype == torch.int32
    assert tiled.scales.shape == (nb, k // gs, block) and tiled.scales.dtype == torch.float32
    y = kernels.w4a16_tiled(x, tiled, BLOCK_N=bn, SPLIT=split)
    rows = kernels.w4a16_gemv(x, p, s, gs, tc=True, BLOCK_N=bn, SPLIT=split)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    assert torch.equal(y, rows)
    assert _rel_err(y, exact) < 8e-3
    assert _counters_are_zero(y.device)


def test_tile_major_layout():
    n, k, gs, block = 45, 512, 128, 16
    x, p, s, _ = _case(1, n, k, gs, seed=11)
    p, s = p.cpu(), s.cpu()
    tiled = kernels.tile_major(p, s, gs, block=block)
    words, scales = tiled.words, tiled.scales
    rows = p.view(torch.int32)  # (N, K // 8): word w of a row holds columns 8w .. 8w + 7
    groups, wpg = k // gs, gs // 8
    assert words.shape == (3, groups, block, wpg) and scales.shape == (3, groups, block)
    assert words.is_contiguous() and scales.is_contiguous()
    assert tiled.nbytes() == 4 * (3 * groups * block * wpg + 3 * groups * block)
    # a few elements by hand
    assert int(words[0, 0, 0, 0]) == int(rows[0, 0])
    assert int(words[1, 2, 3, 4]) == int(rows[1 * block + 3, 2 * wpg + 4])
    assert int(words[2, 3, 12, wpg - 1]) == int(rows[2 * block + 12, 4 * wpg - 1])  # row 44, the last
    assert float(scales[1, 2, 3]) == float(s[19, 2]) and float(scales[2, 3, 12]) == float(s[44, 3])
    # every element: words[b, g, r, w] == rows[b*block + r, g*wpg + w]; the padded rows 45..47 are zero
    for b in range(3):
        for g in range(groups):
            for r in range(block):
                row = b * block + r
                if row < n:
                    assert torch.equal(words[b, g, r], rows[row, g * wpg:(g + 1) * wpg]), (b, g, r)
                    assert float(scales[b, g, r]) == float(s[row, g]), (b, g, r)
                else:
                    assert int(words[b, g, r].count_nonzero()) == 0 and float(scales[b, g, r]) == 0.0
    # memory order: a (block, words) tile of one group is one contiguous run, the groups of a block one after another
    flat = words.reshape(-1)
    assert int(flat[((1 * groups + 2) * block + 3) * wpg + 4]) == int(rows[19, 2 * wpg + 4])
    # the nibbles: nibble j of word w is weight column 8w + j of its group
    q = packing.unpack_int4_torch(p)
    wd = words[1, 2, 3].to(torch.int64)
    for j in range(8):
        nib = (((wd >> (4 * j)) & 0xF) ^ 8) - 8
        assert torch.equal(nib.to(torch.int8), q[19, 2 * gs + j:3 * gs:8]), j
    assert kernels.tile_major(p, s, gs).block == 128 and kernels.tile_major(p, s, gs).words.shape[0] == 1


def test_tile_major_and_tiled_refuse_bad_inputs():
    n, k, gs = 40, 256, 128
    x, p, s, _ = _case(2, n, k, gs)
    with pytest.raises(TypeError, match="packed must be a 2-D uint8"):
        kernels.tile_major(p.view(torch.int8), s, gs)
    with pytest.raises(ValueError, match=r"scales must be float32 of shape \(40, 2\)"):
        kernels.tile_major(p, s[:, :1], gs)
    with pytest.raises(ValueError, match=r"scales must be float32 of shape \(40, 2\)"):
        kernels.tile_major(p, s.double(), gs)
    for block in (24, 8, 0):
        with pytest.raises(ValueError, match="block must be a power of two >= 16"):
            kernels.tile_major(p, s, gs, block=block)
    with pytest.raises(ValueError, match="power of two >= 32"):
        kernels.tile_major(p, torch.ones(n, 4, device=DEV), 48)
    with pytest.raises(ValueError, match="does not divide K = 256"):
        kernels.tile_major(p, torch.ones(n, 1, device=DEV), 512)
    tiled = kernels.tile_major(p, s, gs, block=32)
    with pytest.raises(TypeError, match="tiled must come from tile_major"):
        kernels.w4a16_tiled(x, (p, s))
    with pytest.raises(ValueError, match="tensor-core path only"):
        kernels.w4a16_tiled(x.to(torch.float16), tiled)
    q32, s32 = symmetric.quantize(torch.randn(n, k), 4, "group", 32)
    with pytest.raises(ValueError, match="tensor-core path only"):  # groups of 32: no tc path
        kernels.w4a16_tiled(x, kernels.tile_major(packing.pack_int4(q32).to(DEV), s32.to(DEV), 32))
    with pytest.raises(ValueError, match="BLOCK_N 64 must divide the tile-major block 32"):
        kernels.w4a16_tiled(x, tiled, BLOCK_N=64)
    with pytest.raises(ValueError, match="BLOCK_N 64 must divide the tile-major block 32"):
        kernels.w4a16_tiled(x, tiled, BLOCK_N=64, MX=32)
    with pytest.raises(ValueError, match="K = 128 columns but the tile-major weight has K = 256"):
        kernels.w4a16_tiled(x[:, :128], tiled)
    with pytest.raises(ValueError, match=r"K = 128 columns but packed"):
        kernels.w4a16_gemv(x[:, :128], p, s, gs, tc=True)
    with pytest.raises(ValueError, match="scales must be float32 of shape"):
        kernels.tile_major(p, "scales", gs)
    for mx in (8, 48):
        with pytest.raises(ValueError, match="MX .* must be a power of two >= 16"):
            kernels.w4a16_tiled(x, tiled, MX=mx)


def test_w8_config_name_boundaries():
    got = {m: kernels.w8_config_name(m, False) for m in (1, 16, 17, 64, 65, 1000)}
    assert got == {1: "w8_dot", 16: "w8_dot", 17: "w8_dot_wide", 64: "w8_dot_wide", 65: "w8_dot_big",
                   1000: "w8_dot_big"}
    assert {kernels.w8_config_name(m, True) for m in (1, 17, 65)} == {"w8_rows"}
    for cfg in (kernels.CONFIGS, kernels.CPU_CONFIGS):  # every name is in both tables, with M tiles that grow
        assert [cfg[name]["BLOCK_M"] for name in ("w8_dot", "w8_dot_wide", "w8_dot_big")] == [16, 32, 64]


@pytest.mark.parametrize("m,n,k,name", [(20, 77, 320, "w8_dot_wide"), (70, 33, 300, "w8_dot_big")])
def test_w8a16_at_larger_m_matches_the_exact_product(m, n, k, name, monkeypatch):
    gen = torch.Generator().manual_seed(m)
    w = torch.randn(n, k, generator=gen)
    q, s = symmetric.quantize(w, 8, "channel")
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    exact = x.double() @ (q.double() * s.double()[:, None]).T
    picked = []
    real = kernels.w8_config_name
    monkeypatch.setattr(kernels, "w8_config_name", lambda mm, rows: picked.append(real(mm, rows)) or picked[-1])
    y = kernels.w8a16_gemv(x.to(DEV), q.to(DEV), s.to(DEV))
    assert picked == [name]  # the dot path (M above w8_rows_max_m), with the tile for this M
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    assert _rel_err(y, exact) < 8e-3
    row_err = (y.double().cpu() - exact).abs().amax(dim=1) / exact.abs().amax(dim=1)
    assert float(row_err.max()) < 1.6e-2  # the last, partial M block too (70 = 64 + 6 in the interpreter)


@pytest.mark.gpu
def test_gpu_tc_wide_and_tiled_large_shapes():
    if not kernels.tc_available(torch.empty(1, 4096, dtype=torch.bfloat16, device=DEV), 128):
        pytest.skip("needs a Hopper GPU (compute capability 9.x)")
    for m in (17, 100):  # MX 32, one block; MX 64, two blocks (the H100 configuration: BLOCK_N 128, split-K)
        x, p, s, exact = _case(m, 4099, 4096, 128, seed=m)
        y = kernels.w4a16_gemv(x, p, s, 128, tc=True)
        assert _rel_err(y, exact) < 8e-3
        assert torch.equal(y, kernels.w4a16_gemv(x, p, s, 128, tc=True))
        assert _counters_are_zero(y.device)
        for block in (128, 256):
            assert torch.equal(kernels.w4a16_tiled(x, kernels.tile_major(p, s, 128, block=block)), y)


@pytest.mark.parametrize("groups,split,want", [(64, 8, (8, 8)), (64, 10, (10, 7)), (7, 3, (3, 3)), (5, 9, (5, 1)),
                                               (64, 0, (1, 64)), (3, 2, (2, 2)), (9, 4, (3, 3))])
def test_split_groups_gives_every_program_a_group(groups, split, want):
    """split-K: at most `split` programs a block of rows, whole groups each, none without one (9 groups in 4 would be
    3+3+3+0: three programs)."""
    got = kernels.split_groups(groups, split)
    assert got == want
    n, per = got
    assert (n - 1) * per < groups <= n * per  # the last program has at least one group
    assert kernels.tc_split({"SPLIT": split}, 64, groups, "cpu") == got
    assert kernels.tc_split({"CTAS_PER_SM": 4}, 2, groups, "cpu") == kernels.split_groups(groups, 2)  # 1 SM off GPU
