"""A NumPy model of one CUDA block summing its data, so the algorithm can be watched on a machine without a GPU.

Threads are array lanes: ``values[t]`` is thread t's register. The model follows lesson 04's block reduction:
(1) each thread accumulates its grid-stride share into a register, (2) each warp of 32 lanes runs the shuffle-down
tree (``__shfl_down_sync``: lane i adds lane i+offset's value, offsets 16, 8, 4, 2, 1), (3) lane 0 of each warp
writes its partial to shared memory, a barrier, (4) warp 0 reduces the partials the same way, and thread 0 holds
the block's total. Every step can be recorded, so the lesson prints the tree round by round.
"""
from __future__ import annotations

import numpy as np

WARP = 32


def shfl_down(values: np.ndarray, offset: int) -> np.ndarray:
    """What each lane of every warp receives from ``__shfl_down_sync(mask, v, offset)``: lane i gets lane i+offset's
    value; lanes whose source is past the end of the warp get their own value back (as on the hardware)."""
    lanes = values.reshape(-1, WARP)
    src = np.arange(WARP) + offset
    got = lanes[:, np.minimum(src, WARP - 1)].copy()
    got[:, src >= WARP] = lanes[:, src >= WARP]
    return got.reshape(values.shape)


def warp_sum(values: np.ndarray, trace: list | None = None) -> np.ndarray:
    """The shuffle-down tree on every warp at once; afterwards lane 0 of each warp holds that warp's sum."""
    v = values.astype(np.float32).copy()
    offset = WARP // 2
    while offset > 0:
        v = (v + shfl_down(v, offset)).astype(np.float32)
        if trace is not None:
            trace.append((f"shuffle down by {offset:2d}", v.copy()))
        offset //= 2
    return v


def thread_partials(x: np.ndarray, threads: int, blocks: int = 1, block: int = 0) -> np.ndarray:
    """Step 1: thread t of block ``block`` sums x[i] for i = block*threads + t, then every grid stride after it."""
    x = np.asarray(x, dtype=np.float32)
    stride = threads * blocks
    acc = np.zeros(threads, dtype=np.float32)
    for start in range(block * threads, len(x), stride):
        chunk = x[start:start + threads]
        acc[:len(chunk)] += chunk  # lanes past the end (the unchecked tail) add nothing: the bounds check
    return acc


def block_reduce(values: np.ndarray, trace: list | None = None) -> np.float32:
    """Steps 2-4 for one block whose threads hold ``values`` (length a multiple of 32, at most 1024)."""
    values = np.asarray(values, dtype=np.float32)
    if len(values) % WARP or not 0 < len(values) <= 1024:
        raise ValueError(f"a block has a multiple of 32 threads, at most 1024; got {len(values)}")
    v = warp_sum(values, trace)
    shared = v[::WARP].copy()  # lane 0 of each warp writes its partial: shared[warp] (then __syncthreads)
    if trace is not None:
        trace.append((f"{len(shared)} warp partials in shared memory", shared.copy()))
    lane_vals = np.zeros(WARP, dtype=np.float32)
    lane_vals[:len(shared)] = shared  # warp 0 reads them, lanes beyond the number of warps read 0
    final = warp_sum(lane_vals, trace)
    return np.float32(final[0])


def simulate_sum(x: np.ndarray, threads: int = 256, blocks: int = 4, trace: list | None = None) -> np.float32:
    """The whole grid: every block reduces its grid-stride share, then the block totals are added (the atomics)."""
    totals = []
    for b in range(blocks):
        totals.append(block_reduce(thread_partials(x, threads, blocks, b), trace if b == 0 else None))
    out = np.float32(0)
    for t in totals:
        out = np.float32(out + t)
    return out
