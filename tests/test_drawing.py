"""Where a failed check's output is wrong: the where map a failed case carries (compare.where_map) and its drawing
(grading/drawing.py), from real Triton kernels with one known bug each run through lesson 05's exercises."""
from __future__ import annotations

import io
import time

import matplotlib
import pytest
import torch

import gpucourse  # noqa: F401 - CPU mode (TRITON_INTERPRET=1) before triton is imported
import triton
import triton.language as tl

from gpucourse.grading import checker, compare, drawing
from gpucourse.grading.compare import NEVER, PAST, RIGHT, WRONG
from gpucourse.grading.exercise import Case, get

matplotlib.use("Agg")


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, LOAD_N, STORE_N, BLOCK: tl.constexpr):
    """out = x + y over the lanes below STORE_N (n: a correct kernel; n + 1: one store past the end); y is read only
    below LOAD_N (n - 1: an off-by-one that leaves out[n-1] = x[n-1])."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < STORE_N, other=0.0)
    y = tl.load(y_ptr + offs, mask=offs < LOAD_N, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=offs < STORE_N)


BLOCK = 256


def _vector_add(programs, load_n=lambda n: n, store_n=lambda n: n, block=BLOCK):
    def vector_add(x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _add[(programs(n, block),)](x, y, out, n, load_n(n), store_n(n), BLOCK=block)
        return out
    return vector_add


def cdiv(n, block):
    return triton.cdiv(n, block)


def floor(n, block):  # rounded down: the last partial block never runs
    return n // block


grid_misses_tail = _vector_add(floor)
y_mask_off_by_one = _vector_add(cdiv, load_n=lambda n: n - 1)
store_mask_off_by_one = _vector_add(cdiv, store_n=lambda n: n + 1)  # offs <= n


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_misses_last_column_block(a, b):
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(m, 16), n // 16)  # rounded down: the last partial block of columns never runs
    _matmul[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                  BM=16, BN=16, BK=16)
    return c


def _verdict(exercise: str, fn, params: dict, seed: int = 11):
    """The checker's verdict on one case of ``exercise`` with these sizes (make_case, run_case, evaluate: what
    ``check`` does per case)."""
    ex = get(exercise)
    case = Case("test", params)
    args, expected = checker.make_case(ex, case, seed, 0)
    outcome = checker.run_case(ex, fn, checker.to_device(args, gpucourse.torch_device()))
    return checker.evaluate(ex, case, args, expected, outcome, gpucourse.torch_device().type)


def _legend(fig) -> list:
    return [t.get_text() for t in fig.legends[0].get_texts()]


@pytest.mark.parametrize("n", [500, 300, 255])  # one strip: up to drawing.WIDTH
def test_a_grid_that_misses_the_tail_leaves_exactly_the_tail_never_written(n):
    v = _verdict("vector_add", grid_misses_tail, {"n": n})
    tail = n % BLOCK
    assert not v.passed and v.where is not None and v.where.shape == (n,)
    assert (v.where.n_never, v.where.n_wrong, v.where.n_right, v.where.n_past) == (tail, 0, n - tail, 0)
    assert bool((v.where.codes[n - tail:] == NEVER).all()) and bool((v.where.codes[:n - tail] == RIGHT).all())
    fig = drawing.draw(v.where, "vector_add", f"n={n}")
    assert _legend(fig) == [f"right: {n - tail:,}", "wrong value: 0", f"never written: {tail:,}"]
    assert fig.axes[0].get_title().startswith(f"vector_add, case 'n={n}': where the output is wrong")
    assert fig.axes[0].get_xlabel() == "element index"


def test_an_off_by_one_load_mask_makes_the_last_element_a_wrong_value():
    n = 700
    v = _verdict("vector_add", y_mask_off_by_one, {"n": n})
    assert (v.where.n_wrong, v.where.n_never, v.where.n_right) == (1, 0, n - 1)
    assert int(v.where.codes[-1]) == WRONG and bool((v.where.codes[:-1] == RIGHT).all())
    assert "wrong value: 1" in _legend(drawing.draw(v.where))


def test_a_store_past_the_end_is_marked_after_the_last_element():
    n = 400
    v = _verdict("vector_add", store_mask_off_by_one, {"n": n})
    assert any("past the end" in p for p in v.problems)
    assert v.where.n_past == 1 and v.where.past_end.tolist() == [0]  # the first element after the end
    assert (v.where.n_right, v.where.n_wrong, v.where.n_never) == (n, 0, 0)
    fig = drawing.draw(v.where, "vector_add", "n=400")
    assert _legend(fig)[-1] == "written past the end: 1"
    strip = fig.axes[0].get_images()[0].get_array()
    assert strip.shape[:2] == (1, n + 1)  # one more cell than the output, after its last element
    purple = [int(drawing.COLOURS[PAST][i:i + 2], 16) / 255 for i in (1, 3, 5)]
    assert strip[0, n, :3].tolist() == pytest.approx(purple)


def test_a_matmul_that_misses_the_last_column_block_leaves_those_columns_never_written():
    m, n, k = 40, 50, 32
    v = _verdict("matmul", matmul_misses_last_column_block, {"m": m, "n": n, "k": k, "dtype": "float32"})
    missed = n - (n // 16) * 16
    assert tuple(v.where.codes.shape) == (m, n)
    assert (v.where.n_never, v.where.n_wrong, v.where.n_right) == (m * missed, 0, m * (n - missed))
    assert bool((v.where.codes[:, n - missed:] == NEVER).all()) and bool((v.where.codes[:, :n - missed] == RIGHT).all())
    fig = drawing.draw(v.where, "matmul", "40x50x32")
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("column", "row")
    assert f"never written: {m * missed:,}" in _legend(fig) and "output 40x50" in ax.get_title()


def _plain_render_s(size) -> float:
    """Seconds to render a plain image of a million pixels in a figure of ``size``: the machine's speed right now."""
    import matplotlib.pyplot as plt

    t0 = time.perf_counter()
    fig, ax = plt.subplots(figsize=size)
    ax.imshow(torch.rand(1000, 1000).numpy())
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
    return time.perf_counter() - t0


def test_a_million_elements_draw_in_under_two_seconds():
    n = 1_000_000
    codes = torch.zeros(n, dtype=torch.int8)
    codes[123_456] = WRONG
    codes[-1000:] = NEVER
    t0 = time.perf_counter()
    where = compare.where_map((n,), codes)
    fig = drawing.draw(where, "vector_add", "large")
    png = io.BytesIO()
    fig.savefig(png, format="png")  # the rendering too, not only the figure's description
    seconds = time.perf_counter() - t0
    # Under 2 s on an idle 2-core machine; on a loaded one, within eight plain renders of a million-pixel image timed
    # beside it (a drawing that handled elements one by one would take minutes either way).
    plain = min(_plain_render_s(fig.get_size_inches()) for _ in range(2))
    assert seconds < 2 or seconds < 8 * plain, f"{seconds:.2f} s; a plain render {plain:.2f} s"
    assert png.getvalue().startswith(b"\x89PNG")
    assert _legend(fig) == ["right: 998,999", "wrong value: 1", "never written: 1,000"]
    assert f"rows of {drawing.WIDTH} elements" in fig.axes[0].get_title()
    assert len(fig.axes[0].collections) == 1  # the lone wrong element is circled (the 1,000 never written are not)


def test_large_maps_are_pooled_by_blocks_and_any_wrong_element_marks_its_block():
    codes = torch.zeros(3000, 2000, dtype=torch.int8)
    codes[1234, 567] = WRONG
    where = compare.where_map(codes.shape, codes)
    assert where.block == (4, 2) and tuple(where.codes.shape) == (750, 1000)
    assert (where.codes != RIGHT).nonzero().tolist() == [[1234 // 4, 567 // 2]]
    assert (where.n_wrong, where.n_right) == (1, 3000 * 2000 - 1)  # counts stay exact
    # drawn: the 750x1000 cells pooled again to at most 256x512 (4x2 of them), a cell 16x4 elements
    assert "a cell is 16x4 elements, coloured by its worst" in drawing.draw(where).axes[0].get_title()


def test_outputs_of_three_or_more_dimensions_show_the_first_wrong_slice():
    codes = torch.zeros(3, 4, 5, 6, dtype=torch.int8)
    codes[1, 2, 3, 4] = WRONG
    codes[2, 0, 0, 0] = NEVER
    where = compare.where_map(codes.shape, codes)
    assert where.slice == (1, 2) and tuple(where.codes.shape) == (5, 6) and int(where.codes[3, 4]) == WRONG
    assert (where.n_wrong, where.n_never) == (1, 1)
    assert "slice [1, 2, :, :], the first with a wrong element" in drawing.draw(where).axes[0].get_title()


def test_nothing_to_draw_gives_no_map_and_bad_input_is_refused():
    assert compare.where_map((10,), None) is None and compare.where_map((0,), torch.zeros(0, dtype=torch.int8)) is None
    assert compare.past_end_writes(torch.zeros(10)) is None  # not an output the checker allocated: no guard band
    with pytest.raises(ValueError, match="codes of shape"):
        compare.where_map((10,), torch.zeros(9, dtype=torch.int8))
    with pytest.raises(TypeError, match="must be a WhereMap"):
        drawing.draw(torch.zeros(3))


def test_check_draws_at_most_three_failed_cases_and_nothing_for_a_pass(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(drawing, "show", shown.extend)
    big = 8192  # few programs even for the exercise's large case (the interpreter runs each in NumPy)
    assert checker.check("vector_add", _vector_add(cdiv, block=big), plot=True).passed
    assert shown == []
    r = checker.check("vector_add", _vector_add(floor, block=big), plot=True)
    failed = [c for c in r.cases if not c.passed]
    assert len(failed) >= 4 and all(c.where is not None for c in failed)  # n=1 and every size with a partial block
    assert len(shown) == drawing.MAX_FIGURES
    # the cases whose pictures hold most categories come first: "large" is right and then never written, each
    # smaller case is one block or less, never written throughout
    drawn = [next(c for c in failed if f.axes[0].get_title().startswith(f"vector_add, case {c.name!r}"))
             for f in shown]
    assert [c.name for c in drawn] == [c.name for c in failed if c in drawn] and "large" in [c.name for c in drawn]
    assert all(c.where.n_right == 0 for c in failed if c.name != "large")
    assert f"{drawing.MAX_FIGURES} of the {len(failed)} failed cases" in capsys.readouterr().out
    quiet = []
    monkeypatch.setattr(drawing, "show", quiet.extend)
    checker.check("vector_add", _vector_add(floor, block=big), quiet=True, plot=True)
    assert quiet == []  # quiet prints and draws nothing


def test_writes_past_the_end_of_a_2d_output_are_drawn_as_rows_below_it():
    codes = torch.zeros(4, 8, dtype=torch.int8)
    codes[0, 0] = WRONG
    where = compare.where_map((4, 8), codes, torch.tensor([0, 1, 9]))  # row 4: columns 0, 1; row 5: column 1
    fig = drawing.draw(where, "matmul", "4x8")
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape[:2] == (6, 8)
    purple = [int(drawing.COLOURS[PAST][i:i + 2], 16) / 255 for i in (1, 3, 5)]
    is_past = [[list(image[r, c, :3]) == pytest.approx(purple) for c in range(8)] for r in range(6)]
    assert [(r, c) for r in range(6) for c in range(8) if is_past[r][c]] == [(4, 0), (4, 1), (5, 1)]
    assert _legend(fig)[-1] == "written past the end: 3" and "below the line" in fig.axes[0].get_title()


def test_outside_a_notebook_show_says_how_to_draw_instead(capsys):
    codes = torch.zeros(5, dtype=torch.int8)
    codes[4] = NEVER
    drawing.show([drawing.draw(compare.where_map((5,), codes))])
    assert "show in a notebook" in capsys.readouterr().out
    drawing.show([])
    assert capsys.readouterr().out == ""
