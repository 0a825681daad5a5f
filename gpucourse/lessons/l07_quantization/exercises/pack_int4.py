"""Lesson 07's second exercise: pack two int4 values into each byte, in the lesson's layout."""
from __future__ import annotations

from gpucourse.grading.exercise import Case, Exercise

STATEMENT = """\
Write `pack_int4(q)` that packs the int4 values of `q` two per byte and returns a new uint8 tensor of shape
(N, K // 2). `q` is int8 (N, K) with every value in [-8, 7] and K even. The layout is the lesson's:
  packed[n, j] = (q[n, 2j] & 0xF) | ((q[n, 2j + 1] & 0xF) << 4)
(the even column in the low nibble bits 0-3, the odd column in the high nibble bits 4-7, each in 4-bit two's
complement, so -1 is 0b1111 and -8 is 0b1000). Use torch operations. Raise a ValueError for an odd K (two values
share a byte). Checked: every value in [-8, 7] in both nibbles, random matrices, K not a power of two.
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


EXERCISE = Exercise(
    id="pack_int4",
    function="pack_int4",
    signature="pack_int4(q: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="none",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        Case("every value in [-8, 7], both nibbles, 16x32", {"n": 16, "k": 32, "kind": "every value"}),
        Case("random 64x128", {"n": 64, "k": 128}),
        Case("K = 30 (not a power of two), 5 rows", {"n": 5, "k": 30}),
        Case("one byte: 1x2", {"n": 1, "k": 2}),
    ),
)
