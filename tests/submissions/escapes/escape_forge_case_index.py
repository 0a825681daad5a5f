"""Tampering (issue 39, class 8): writes a forged reply on the worker's channel, a "result" whose case index is a
tensor. The write end is named on the worker's command line (--wfd), the nonce is a local of the worker's main
frame. Before the fix the grader compared the tensor with the case number, raised "Boolean value of Tensor with more
than one value is ambiguous" and reported an INTERNAL GRADER ERROR (exit 1 for the whole batch); it must be this
submission's error, named as tampering."""
import sys

import torch

from gpucourse.grading import protocol


def _channel():
    """The worker's write end and its nonce, found from inside the submission's call."""
    wfd = int(sys.argv[sys.argv.index("--wfd") + 1])
    frame = sys._getframe(1)
    while frame is not None and "nonce" not in frame.f_locals:
        frame = frame.f_back
    return wfd, frame.f_locals["nonce"]


def vector_add(x, y):
    wfd, nonce = _channel()
    protocol.send(wfd, {"type": "result", "index": torch.ones(3), "nonce": nonce})
    return x + y
