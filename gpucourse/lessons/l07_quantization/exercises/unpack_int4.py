"""Lesson 07's third exercise: unpack int4 pairs with shifts in a Triton kernel, signs included."""
from __future__ import annotations

from gpucourse.grading.exercise import Case, Exercise, between

STATEMENT = """\
Write `unpack_int4(p)`, the inverse of `pack_int4`: `p` is uint8 (N, B) holding two int4 values per byte in the
lesson's layout (the low nibble is column 2j, the high nibble column 2j + 1); return a new int8 tensor (N, 2B) with
out[n, 2j] = the signed value of the low nibble of p[n, j] and out[n, 2j + 1] that of its high nibble, each in
[-8, 7]. Do the unpacking in a Triton kernel you launch (shifts on integers, `<<` and `>>`): a nibble 0b1111 is -1,
not 15. Hint: a byte read as int8 and widened to int32 keeps its sign, and `>>` on a signed integer copies the sign
bit in from the left. Checked on every byte value 0..255, random bytes and rows of odd length.
Your kernel must compute the answer: a torch compute op (arithmetic, a reduction, a matmul...) on the inputs or
on anything derived from them (a copy, a view, a buffer your kernel wrote) fails the check, which names it;
allocating, viewing, copying, casting and filling tensors is fine.
"""


def make_inputs(params: dict, gen) -> tuple:
    import torch

    n, b = params["n"], params["b"]
    if params.get("kind") == "every byte":
        p = torch.arange(n * b, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(n, b)
    else:
        p = torch.randint(0, 256, (n, b), generator=gen, dtype=torch.uint8)
        if n * b == 1 and int(p[0, 0]) >> 4 == int(p[0, 0]) & 0xF:  # one byte: two different nibbles, or a
            p[0, 0] ^= 0x10 * int(torch.randint(1, 16, (1,), generator=gen))  # swapped order passes by chance
    return (p,)


def reference(p):
    from gpucourse.lessons.l07_quantization import packing

    return packing.unpack_int4_torch(p)


EXERCISE = Exercise(
    id="unpack_int4",
    function="unpack_int4",
    signature="unpack_int4(p: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="triton",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        Case("every byte 0..255 (16x16)", {"n": 16, "b": 16, "kind": "every byte"}),
        # Sizes are drawn fresh for every run from each class (the seed stays with the checker).
        Case("random, ragged", {"n": between(40, 90), "b": between(60, 130)}),
        Case("odd bytes per row", {"n": between(3, 11, odd=True), "b": between(21, 61, odd=True)}),
        Case("one byte: 1x1", {"n": 1, "b": 1}),
    ),
    reference_ops=("aten.bitwise_and", "aten.bitwise_right_shift", "aten.__rshift__", "aten.bitwise_left_shift",
                   "aten.__lshift__"),
)
