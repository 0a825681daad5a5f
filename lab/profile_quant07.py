#!/usr/bin/env python3
"""Nsight Compute view of lesson 07's M = 1 quantized GEMVs: what bounds them at ~27 µs whatever their bytes.
Runs each kernel a few times on 8192 x 8192 (bf16 F.linear, the lesson's int8 and int4 kernels, the word-wise int4
kernel of explore_quant_words.py, beside this script) so `ncu` can profile the last call of each:

  ncu --set full -k regex:'w8a16|w4a16|words|gemv|gemm|sm90' --launch-skip 2 --launch-count 1 ... \
      python3 lab/profile_quant07.py [bf16 i8 i4 words i4tc i4tiled]

The course is imported as the installed package; explore_quant_words is found because Python puts this script's
folder first on its path.
"""
import sys

import torch
import torch.nn.functional as F

import explore_quant_words as e
from gpucourse.lessons.l07_quantization import measure
from gpucourse.quant import kernels, packing, symmetric

n = k = 8192
torch.manual_seed(0)
w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
q8, s8 = symmetric.quantize(w, 8, "channel")
q4, s4 = symmetric.quantize(w, 4, "group", 128)
p4 = packing.pack_int4(q4)
which = sys.argv[1:] or ["bf16", "i8", "i4", "words"]
for _ in range(3):
    if "bf16" in which:
        F.linear(x, w)
    if "i8" in which:
        kernels.w8a16_gemv(x, q8, s8)
    if "i4" in which:  # the lesson kernel: x planes, then the words kernel
        kernels.w4a16_gemv(x, p4, s4, 128)
    if "i4tc" in which:  # the tc kernel on pack_int4's row layout
        kernels.w4a16_gemv(x, p4, s4, 128, tc=True)
    if "i4tiled" in which:  # the tc kernel on tile-major weights (laid out on the first call)
        measure.lesson_int4(x, p4, s4, 128)
    if "words" in which:
        e.run_words(x, p4.view(torch.int32), s4, 4, 16, 4, 16, 4, 3, 1, False)
torch.cuda.synchronize()
