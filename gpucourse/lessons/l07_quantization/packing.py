"""Lesson 07's int4 packing, under the name the lesson's notebook and exercise specs use: it lives in the kit,
:mod:`gpucourse.quant.packing` (the layout is described there), because lesson 11 packs its weights the same way."""
from gpucourse.quant.packing import bit_layout, pack_int4, unpack_int4, unpack_int4_torch  # noqa: F401 (re-exported)
