"""Ring all-reduce built from point-to-point sends (the course's answer to the ``ring_all_reduce`` exercise), and
the latency + size / bandwidth model of a collective's time.

The ring: split the tensor into N chunks (N = world size; sizes differ by at most one element when N does not divide
it). Reduce-scatter: in N - 1 steps every rank sends one chunk to its right neighbour and adds the chunk it receives
from its left one; afterwards rank r holds the full sum of chunk (r + 1) mod N. All-gather: N - 1 more steps pass
the finished chunks around. Each rank sends 2 (N - 1) / N of the tensor in all, whatever N is: that is why the ring's
time does not grow with the number of GPUs (its latency term does).
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist


def chunk_bounds(n: int, world: int) -> list:
    """Start offsets of the N chunks of an n-element tensor, and n: chunk i is [b[i], b[i + 1])."""
    return [n * i // world for i in range(world + 1)]


def ring_all_reduce(tensor: torch.Tensor, group=None) -> None:
    """Sum ``tensor`` over the ranks of ``group`` in place, with point-to-point sends and receives only. Any size,
    any N."""
    group = group if group is not None else dist.group.WORLD
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world == 1:
        return
    ranks = dist.get_process_group_ranks(group)
    right, left = ranks[(rank + 1) % world], ranks[(rank - 1) % world]
    flat = tensor.reshape(-1) if tensor.is_contiguous() else tensor.contiguous().reshape(-1)
    b = chunk_bounds(flat.numel(), world)
    chunks = [flat[b[i]:b[i + 1]] for i in range(world)]
    scratch = torch.empty(max(c.numel() for c in chunks), dtype=flat.dtype, device=flat.device)

    def exchange(send_i: int, recv_into: torch.Tensor) -> None:
        # The send and the receive are posted together and waited for together: every rank sends and receives at
        # once, so none blocks in a send whose receiver is itself blocked in a send. (With NCCL, a send and a receive
        # issued one after the other run in order on one stream; batch_isend_irecv runs them as one group.)
        ops = []
        if chunks[send_i].numel():
            ops.append(dist.P2POp(dist.isend, chunks[send_i], right, group))
        if recv_into.numel():
            ops.append(dist.P2POp(dist.irecv, recv_into, left, group))
        for req in dist.batch_isend_irecv(ops) if ops else ():
            req.wait()

    for step in range(world - 1):  # reduce-scatter
        send_i, recv_i = (rank - step) % world, (rank - step - 1) % world
        got = scratch[:chunks[recv_i].numel()]
        exchange(send_i, got)
        chunks[recv_i].add_(got)
    for step in range(world - 1):  # all-gather: rank holds the finished chunk (rank + 1) % world
        send_i, recv_i = (rank + 1 - step) % world, (rank - step) % world
        exchange(send_i, chunks[recv_i])
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))


def bidirectional_ring_all_reduce(tensor: torch.Tensor, group=None) -> None:
    """The same sum with two rings at once, in opposite directions: the first half of the tensor goes round to the
    right, the second half to the left, each step's four transfers posted as one group. Each rank sends as much as
    with one ring, but to two peers instead of one. NCCL runs several rings at once for the same reason: with
    NVSwitch, the transfers to one peer do not use every link a GPU has (the recorded run measures both). Tensors
    of fewer than 2 N elements take the one ring."""
    group = group if group is not None else dist.group.WORLD
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    flat = tensor.reshape(-1) if tensor.is_contiguous() else tensor.contiguous().reshape(-1)
    if world == 1:
        return
    if flat.numel() < 2 * world:
        ring_all_reduce(tensor, group)
        return
    ranks = dist.get_process_group_ranks(group)
    half = flat.numel() // 2
    # (position in the ring, peer to send to, peer to receive from, chunks): to the right, then to the left.
    rings = []
    for part, pos, to, frm in ((flat[:half], rank, rank + 1, rank - 1), (flat[half:], -rank, rank - 1, rank + 1)):
        b = chunk_bounds(part.numel(), world)
        rings.append((pos % world, ranks[to % world], ranks[frm % world],
                      [part[b[i]:b[i + 1]] for i in range(world)]))
    scratch = [torch.empty(max(c.numel() for c in ch), dtype=flat.dtype, device=flat.device) for *_, ch in rings]

    def exchange(pairs) -> None:  # [(tensor to send, peer), (tensor to receive into, peer)] for both rings
        ops = []
        for (send, to), (into, frm) in pairs:
            if send.numel():
                ops.append(dist.P2POp(dist.isend, send, to, group))
            if into.numel():
                ops.append(dist.P2POp(dist.irecv, into, frm, group))
        for req in dist.batch_isend_irecv(ops) if ops else ():
            req.wait()

    for step in range(world - 1):  # reduce-scatter, both rings
        got = [sc[:ch[(pos - step - 1) % world].numel()] for sc, (pos, _, _, ch) in zip(scratch, rings)]
        exchange([((ch[(pos - step) % world], to), (g, frm)) for g, (pos, to, frm, ch) in zip(got, rings)])
        for g, (pos, _, _, ch) in zip(got, rings):
            ch[(pos - step - 1) % world].add_(g)
    for step in range(world - 1):  # all-gather, both rings
        exchange([((ch[(pos + 1 - step) % world], to), (ch[(pos - step) % world], frm))
                  for pos, to, frm, ch in rings])
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))


def bus_bandwidth(nbytes: float, seconds: float, world: int) -> float:
    """NCCL's bus bandwidth of an all-reduce, GB/s: the algorithm bandwidth (bytes / time) times 2 (N - 1) / N, the
    fraction of the tensor each rank's link carries in a ring. It compares with the link's speed whatever N is."""
    return nbytes / seconds * 2 * (world - 1) / world / 1e9


def fit_latency_bandwidth(sizes_bytes: list, seconds: list, world: int) -> dict:
    """Least squares fit of t = alpha + (2 (N - 1) / N) * size / beta over the measured points, with weights 1 / t
    (relative errors, so the small sizes that fix alpha count as much as the large ones that fix beta). Returns
    alpha (s), beta (bus GB/s) and the model's time at each size."""
    f = 2 * (world - 1) / world
    xs = [f * s for s in sizes_bytes]
    w = [1 / t for t in seconds]
    sw = sum(wi * wi for wi in w)
    sx = sum(wi * wi * x for wi, x in zip(w, xs))
    sy = sum(wi * wi * t for wi, t in zip(w, seconds))
    sxx = sum(wi * wi * x * x for wi, x in zip(w, xs))
    sxy = sum(wi * wi * x * t for wi, x, t in zip(w, xs, seconds))
    det = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / det
    alpha = (sy - slope * sx) / sw
    alpha = max(alpha, 0.0)
    beta = 1 / slope / 1e9 if slope > 0 else math.inf
    return {"alpha_s": alpha, "beta_GBps": beta,
            "model_s": [alpha + x * slope for x in xs]}


def ring_time(nbytes: float, ranks: int, alpha_s: float, link_GBps: float) -> float:
    """Seconds of a flat ring all-reduce over ``ranks``: 2 (N - 1) steps, each paying the latency alpha and moving
    1 / N of the tensor over the slowest link in the ring."""
    steps = 2 * (ranks - 1)
    return steps * (alpha_s + nbytes / ranks / (link_GBps * 1e9))
