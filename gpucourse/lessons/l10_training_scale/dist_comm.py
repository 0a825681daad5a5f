"""The lesson's ``comm`` task (run by dist_run.py on every rank): all-reduce time against size, the ring built from
sends checked against dist.all_reduce and timed beside it, and the floor of one ring step."""
from __future__ import annotations

import torch
import torch.distributed as dist

from gpucourse.lessons.l10_training_scale import ring
from gpucourse.lessons.l10_training_scale.dist_measure import timed, timed_rounds

MB = 1 << 20


def task_comm(rank, world, dev, backend, args) -> dict:
    gpu = backend == "nccl"
    sizes = [1 << k for k in (range(10, 31, 2) if gpu else range(10, 23, 2))]  # bytes: 1 KiB .. 1 GiB (4 MiB CPU)
    out = {"sizes_bytes": sizes, "all_reduce_s": [], "ring_check": []}
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, device=dev)
        reps = 20 if nbytes <= 64 * MB else 5
        out["all_reduce_s"].append(timed(lambda: dist.all_reduce(x), dev, reps=reps if gpu else 5))
    # The ring from sends: same sums as dist.all_reduce, on sizes N does not divide and sizes below N.
    gen = torch.Generator().manual_seed(1234 + rank)
    for n in sorted({1, world + 1, 1000, 1001, 4097}):
        mine = torch.randn(n, generator=gen, dtype=torch.float64).to(dev)
        a, b = mine.clone(), mine.clone()
        dist.all_reduce(a)
        ring.ring_all_reduce(b)
        out["ring_check"].append({"n": n, "max_abs_diff": float((a - b).abs().max())})
        c = mine.clone()
        ring.bidirectional_ring_all_reduce(c)
        out["ring_check"][-1]["bidirectional_max_abs_diff"] = float((a - c).abs().max())
    ring_bytes = 256 * MB if gpu else 4 * MB
    x = torch.ones(ring_bytes // 4, device=dev)
    t = timed_rounds({"ring_s": lambda: ring.ring_all_reduce(x),
                      "bidirectional_ring_s": lambda: ring.bidirectional_ring_all_reduce(x),
                      "all_reduce_s": lambda: dist.all_reduce(x)}, dev, reps=20 if gpu else 3)
    out["ring_vs_all_reduce"] = {"bytes": ring_bytes, **t}
    # The ring's floor: one of its 2 (N - 1) steps alone, the transfer of a 1/N chunk to one neighbour (and from the
    # other), and the same bytes split between both neighbours (what two rings do), and the addition after it.
    chunk = x[:x.numel() // world]
    into = torch.empty_like(chunk)
    half = chunk.numel() // 2
    right, left = (rank + 1) % world, (rank - 1) % world

    def one_way():
        for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunk, right), dist.P2POp(dist.irecv, into, left)]):
            req.wait()

    def both_ways():
        ops = [dist.P2POp(dist.isend, chunk[:half], right), dist.P2POp(dist.irecv, into[:half], left),
               dist.P2POp(dist.isend, chunk[half:], left), dist.P2POp(dist.irecv, into[half:], right)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    out["ring_step"] = {"chunk_bytes": chunk.numel() * chunk.element_size(),
                        **timed_rounds({"one_neighbour_s": one_way, "two_neighbours_s": both_ways,
                                        "add_s": lambda: chunk.add_(into)}, dev, reps=20 if gpu else 3)}
    return out
