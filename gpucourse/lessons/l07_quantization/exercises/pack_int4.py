"""Lesson 07's second exercise: pack two int4 values into each byte, in the lesson's layout.

Judged (``JudgedExercise``), because one case checks a refusal: the statement asks for a ValueError on an odd K, and
a function that packs anyway (or raises something else) fails that case. The other cases compare the bytes exactly
with the lesson's packing, on inputs drawn from the case's seed, and check that ``q`` is left as it was.
"""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading import compare
from gpucourse.grading.exercise import Case, JudgedExercise

STATEMENT = """\
Write `pack_int4(q)` that packs the int4 values of `q` two per byte and returns a new uint8 tensor of shape
(N, K // 2). `q` is int8 (N, K) with every value in [-8, 7] and K even. The layout is the lesson's:
  packed[n, j] = (q[n, 2j] & 0xF) | ((q[n, 2j + 1] & 0xF) << 4)
(the even column in the low nibble bits 0-3, the odd column in the high nibble bits 4-7, each in 4-bit two's
complement, so -1 is 0b1111 and -8 is 0b1000). Use torch operations. Raise a ValueError for an odd K (two values
share a byte). Checked: every value in [-8, 7] in both nibbles, random matrices, K not a power of two, and an
odd K (the ValueError).
"""


def make_inputs(params: dict, gen) -> tuple:
    import torch

    n, k = params["n"], params["k"]
    if params.get("kind") == "every value":  # each of the 16 values in every column: both nibbles, every pairing
        rows = torch.arange(n)[:, None]
        cols = torch.arange(k)[None, :]
        q = ((rows + cols * (1 + (cols % 2) * 4)) % 16 - 8).to(torch.int8)
    else:
        q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
        if n * k == 2:  # one byte: two different values, or a swapped nibble order could pass by chance
            q[0, 1] = (int(q[0, 0]) + 8 + int(torch.randint(1, 16, (1,), generator=gen))) % 16 - 8
    return (q,)


def reference(q):
    from gpucourse.lessons.l07_quantization import packing

    return packing.pack_int4(q)


def judge(fn, params: dict, seed: int) -> list:
    import torch

    gen = torch.Generator().manual_seed(seed)
    if params.get("kind") == "odd K":
        q = torch.randint(-8, 8, (params["n"], params["k"]), generator=gen, dtype=torch.int8)
        try:
            got = fn(q.to(device.torch_device()))
        except ValueError:
            return []
        except Exception as exc:  # noqa: BLE001 - the learner's, reported
            return [f"K = {params['k']} is odd: raise a ValueError (two int4 values share a byte), not "
                    f"{type(exc).__name__}: {str(exc)[:120]}"]
        what = f"a {type(got).__name__}" + (f" of shape {tuple(got.shape)}" if hasattr(got, "shape") else "")
        return [f"K = {params['k']} is odd and pack_int4 returned {what}: raise a ValueError instead (the last "
                f"value of each row has no partner to share its byte; packing it anyway hides a caller's bug)"]
    (q,) = make_inputs(params, gen)
    expected = reference(q)
    mine = q.to(device.torch_device())
    got = fn(mine)
    if not torch.equal(mine.cpu(), q):
        return ["pack_int4 changed q: return a new tensor and leave the input as it was"]
    meta = compare.check_meta(expected, got, device.torch_device().type)
    if meta:
        return meta
    m = compare.compare_values(expected, got.detach().cpu(), 0.0, 0.0)
    return m.problems + [f"hint: {h}" for h in m.hints]


EXERCISE = JudgedExercise(
    id="pack_int4",
    function="pack_int4",
    signature="pack_int4(q: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("every value in [-8, 7], both nibbles, 16x32", {"n": 16, "k": 32, "kind": "every value"}),
        Case("random 64x128", {"n": 64, "k": 128}),
        Case("K = 30 (not a power of two), 5 rows", {"n": 5, "k": 30}),
        Case("one byte: 1x2", {"n": 1, "k": 2}),
        Case("K = 31 (odd): a ValueError", {"n": 4, "k": 31, "kind": "odd K"}),
    ),
    judge=judge,
)
