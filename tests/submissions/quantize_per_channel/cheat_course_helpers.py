"""Cheat (issue 39, class 3): lesson 07's own helpers (quant._scale_of and quant.qmax, the instructor's code; only
quant.quantize is trapped) compute the answer. It used to pass with a flag; a submission answered by the course's
code is an error naming it, as the course's trapped solutions are."""
import torch

from gpucourse.lessons.l07_quantization.quant import _scale_of, qmax


def quantize_per_channel(w, bits):
    wf = w.float()
    scale = _scale_of(wf.abs().amax(dim=1), bits)
    q = torch.clamp(torch.round(wf / scale[:, None]), -qmax(bits), qmax(bits)).to(torch.int8)
    return q, scale
