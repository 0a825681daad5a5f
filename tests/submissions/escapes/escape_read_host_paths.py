"""Hostile: looks for the path the instructor gave for it (here: the folder of the escapes among the checkout's known
submissions, and its own file name; in a course, an nbgrader submitted/<student>/ folder naming the student) wherever
a worker could see it: /proc/self/mountinfo (the source path of every bind mount), the command lines of the sandbox's processes (bwrap's
own, as PID 1), its __file__, sys.argv, a traceback, the environment, the working directory and the worker's frames.
The grader binds a staged copy named submission.py, so it finds nothing and, being a right kernel, passes; were the
path visible, it would raise, naming where it found it. (tests/test_sandbox.py plants a student's name in the path.)"""
import os
import sys
import traceback

import torch
import triton
import triton.language as tl

# Written backwards, so that the submission's own source (which the worker holds while loading it) is no match.
MARKERS = tuple(m[::-1] for m in ("sepacse/snoissimbus", "shtap_tsoh_daer_epacse"))


def _where_seen() -> list:
    seen = []

    def look(where, text):
        if any(m in str(text) for m in MARKERS):
            seen.append(where)

    for name in ("/proc/self/mountinfo", "/proc/self/environ", "/proc/self/cmdline"):
        try:
            look(name, open(name, "rb").read().decode(errors="replace"))
        except OSError:
            pass
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            look(f"/proc/{pid}/cmdline", open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
        except OSError:
            pass
    look("__file__", __file__)
    look("sys.argv", sys.argv)
    look("the environment", dict(os.environ))
    look("the working directory", os.getcwd())
    try:
        raise ValueError("where am I")
    except ValueError:
        look("a traceback", traceback.format_exc())
    frame = sys._getframe()
    while frame is not None:
        if frame.f_globals is not globals():  # its own module holds MARKERS
            look(f"the locals of {frame.f_code.co_name}()", {k: repr(v)[:1000] for k, v in frame.f_locals.items()})
        frame = frame.f_back
    return seen


SEEN = _where_seen()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def vector_add(x, y):
    seen = SEEN + [w for w in _where_seen() if w not in SEEN]
    if seen:
        raise RuntimeError(f"found the path the instructor gave in: {', '.join(seen)}")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
