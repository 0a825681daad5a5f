"""The lesson's multi-process programs, one per task, each started by torchrun on every rank:

    torchrun --standalone --nproc_per_node=2 -m gpucourse.lessons.l10_training_scale.dist_run TASK --out result.json

NCCL on GPUs when every rank has its own (one GPU per rank); otherwise gloo on the CPU at small sizes (the same code:
only the backend, the device and the sizes change). Rank 0 writes the task's results as JSON to ``--out``.

Tasks: ``comm`` (all-reduce time against size; the ring built from sends checked against dist.all_reduce and timed
beside it), ``ddp`` (DistributedDataParallel: same gradients as one process on the whole batch, step time against one
process alone, a profiler timeline of one step), ``fsdp`` (FSDP2's fully_shard against DDP: memory per rank and step
time), ``tp`` (a tensor-parallel MLP: same output as unsplit, weight bytes per rank).
"""
from __future__ import annotations

import argparse
import json
import os
import time

# NVLink multicast (NVLS) off in every process, before NCCL or torch's symmetric memory read their settings.
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gpucourse.lessons.l10_training_scale import model as M  # noqa: E402
from gpucourse.lessons.l10_training_scale import ring  # noqa: E402

MB = 1 << 20


def setup() -> tuple:
    """(rank, world, device, backend): NCCL with one GPU per rank where there are enough, else gloo on the CPU."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", world)):
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
        return rank, world, dev, "nccl"
    dist.init_process_group("gloo")
    return rank, world, torch.device("cpu"), "gloo"


def sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev, reps: int, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` across ``reps`` calls, each call's time the slowest rank's (a collective ends when
    its last rank does); ranks start each call together after a barrier."""
    for _ in range(warmup):
        fn()
    sync(dev)
    times = []
    for _ in range(reps):
        dist.barrier()
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(float(t))
    return sorted(times)[len(times) // 2]


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
    ring_bytes = 256 * MB if gpu else 4 * MB
    x = torch.ones(ring_bytes // 4, device=dev)
    out["ring_vs_all_reduce"] = {"bytes": ring_bytes,
                                 "ring_s": timed(lambda: ring.ring_all_reduce(x), dev, reps=5 if gpu else 3),
                                 "all_reduce_s": timed(lambda: dist.all_reduce(x), dev, reps=5 if gpu else 3)}
    return out


def _cfg(backend: str, precision: str) -> dict:
    return M.config(M.GPU_CONFIG if backend == "nccl" else M.CPU_CONFIG, precision=precision)


def _step(model, opt, x, y, cfg):
    with M.autocast(cfg, x.device):
        loss = ((model(x) - y) ** 2).mean()
    M.backward(model, loss)  # fp16: through the model's GradScaler
    M.step(model, opt)
    return loss


def _timeline(prof, dev) -> list:
    """The events of one profiled step worth drawing: backward work and the all-reduces (GPU kernels on a GPU, the
    host's ops and the gloo work on the CPU), as (lane, name, start_us, duration_us)."""
    rows = []
    for e in prof.events():
        name = e.name
        on_gpu = getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type)
        if dev.type == "cuda" and not on_gpu:
            continue
        if "AllReduce" in name or "all_reduce" in name or "allreduce" in name.lower():
            lane = "all-reduce"
        elif dev.type == "cuda":
            lane = "compute"
        elif name.startswith("autograd::engine::evaluate_function"):
            lane = "backward"
        elif name.startswith(("aten::", "Optimizer.step")) and e.cpu_parent is None:
            lane = "forward/optimizer"
        else:
            continue
        rows.append((lane, name[:60], float(e.time_range.start), float(e.time_range.end - e.time_range.start)))
    t0 = min((r[2] for r in rows), default=0.0)
    return [(lane, name, start - t0, dur) for lane, name, start, dur in rows]


def task_ddp(rank, world, dev, backend, args) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    cfg = _cfg(backend, args.precision)
    out = {"config": cfg}
    # Same gradients: DDP on a 1/N share of the batch per rank against one process on the whole batch (float64 on
    # the CPU, the model's own dtype on a GPU).
    small = M.config(M.CPU_CONFIG, precision="fp32")
    dtype = torch.float64
    ref, _, xs, ys = M.make(dict(small, batch=small["batch"] * world), dev, seed=7)
    ref = ref.to(dtype)
    xs, ys = xs.to(dtype), ys.to(dtype)
    net = DDP(M.Model(small).to(dev).to(dtype), device_ids=[dev.index] if dev.type == "cuda" else None)
    net.module.load_state_dict(ref.state_dict())
    ((ref(xs) - ys) ** 2).mean().backward()
    share = slice(rank * small["batch"], (rank + 1) * small["batch"])
    ((net(xs[share]) - ys[share]) ** 2).mean().backward()  # DDP averages the ranks' gradients
    worst = max(float((p.grad - q.grad).norm() / q.grad.norm()) for p, q in zip(net.module.parameters(),
                                                                               ref.parameters()))
    out["grad_rel_diff_vs_one_process"] = worst
    out["ddp_bucket_cap_mb"] = 25
    # Weak scaling: each rank a full batch of cfg["batch"]; one process alone does the same per-rank work.
    model, opt, x, y = M.make(cfg, dev, seed=rank)
    reps = 10 if backend == "nccl" else 3
    if rank == 0:
        alone = timed_local(lambda: _step(model, opt, x, y, cfg), dev, reps)
    dist.barrier()
    ddp = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    t_ddp = timed(lambda: _step(ddp, opt, x, y, cfg), dev, reps=reps)
    if rank == 0:
        out["alone_s"], out["ddp_s"] = alone, t_ddp
        out["weak_scaling_efficiency"] = alone / t_ddp
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    _step(ddp, opt, x, y, cfg)
    sync(dev)
    with profile(activities=acts) as prof:
        with M.autocast(cfg, dev):
            loss = ((ddp(x) - y) ** 2).mean()
        M.backward(ddp, loss)
        sync(dev)
    out["timeline"] = _timeline(prof, dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        _step(ddp, opt, x, y, cfg)
        sync(dev)
        out["ddp_peak_bytes"] = torch.cuda.max_memory_allocated(dev)
    return out


def timed_local(fn, dev, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def _local_bytes(tensors) -> int:
    from torch.distributed.tensor import DTensor

    total = 0
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        total += t.numel() * t.element_size()
    return total


def _state_bytes(model, opt) -> dict:
    return {"parameters": _local_bytes(model.parameters()),
            "gradients": _local_bytes(p.grad for p in model.parameters()),
            "optimizer": _local_bytes(t for s in opt.state.values() for t in s.values()
                                      if isinstance(t, torch.Tensor) and t.dim() > 0)}


def task_fsdp(rank, world, dev, backend, args) -> dict:
    """DDP against FSDP2, per rank: bytes of parameters, gradients and AdamW state held, and on a GPU the peak of a
    step and its time; twice: the lesson's batch without checkpointing ("none"), and every block checkpointed with a
    quarter of the batch per rank ("block": then the states, which FSDP2 shards, dominate the peak)."""
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = {"config": _cfg(backend, args.precision)}
    reps = 10 if backend == "nccl" else 3
    for ckpt in ("none", "block"):
        cfg = dict(_cfg(backend, args.precision), checkpoint=ckpt)
        if ckpt == "block":
            cfg["batch"] = max(1, cfg["batch"] // 4)
        out[f"{ckpt}_config"] = cfg
        out[ckpt] = {}
        for kind in ("ddp", "fsdp2"):
            model, _, x, y = M.make(cfg, dev, seed=rank)
            if kind == "ddp":
                net = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
            else:
                for blk in model.blocks:
                    fully_shard(blk)
                net = fully_shard(model)
            opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=dev.type == "cuda" or kind == "ddp")
            with M.autocast(cfg, dev):
                loss = ((net(x) - y) ** 2).mean()
            M.backward(net, loss)
            held = _state_bytes(net.module if kind == "ddp" else net, opt)  # gradients, before the step
            M.step(net, opt)  # and zero_grad: the optimizer's state is what is counted next
            held["optimizer"] = _state_bytes(net.module if kind == "ddp" else net, opt)["optimizer"]
            del loss
            res = {"held_bytes": held}
            if dev.type == "cuda":
                sync(dev)
                torch.cuda.reset_peak_memory_stats(dev)
                _step(net, opt, x, y, cfg)
                sync(dev)
                res["peak_bytes"] = torch.cuda.max_memory_allocated(dev)
            res["step_s"] = timed(lambda: _step(net, opt, x, y, cfg), dev, reps=reps)
            out[ckpt][kind] = res
            del net, model, opt, x, y
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return out


def task_tp(rank, world, dev, backend, args) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    d = 1024 if backend == "nccl" else 128
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)).to(dev)
    ref = [p.detach().clone() for p in mlp.parameters()]
    x = torch.randn(4, 64, d, device=dev)
    want = F.linear(F.gelu(F.linear(x, ref[0], ref[1])), ref[2], ref[3])
    mesh = init_device_mesh(dev.type, (world,))
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    got = mlp(x)  # fc1's columns and fc2's rows split across ranks; one all-reduce of (4, 64, d) at the end
    out = {"d": d, "max_abs_diff": float((got - want).abs().max()),
           "weight_bytes_per_rank": _local_bytes(mlp.parameters()),
           "weight_bytes_unsplit": sum(p.numel() * p.element_size() for p in ref),
           "all_reduce_bytes_per_forward": x.numel() * x.element_size()}
    return out


TASKS = {"comm": task_comm, "ddp": task_ddp, "fsdp": task_fsdp, "tp": task_tp}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task", choices=sorted(TASKS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--precision", default=None, choices=M.PRECISIONS,
                    help="default: bf16, or fp16 with a GradScaler on GPUs without bf16 tensor cores (a T4)")
    args = ap.parse_args()
    rank, world, dev, backend = setup()
    if args.precision is None:  # rank 0 says why on a T4; gloo ranks on the CPU run bf16
        args.precision = M.mixed_precision(say=rank == 0) if dev.type == "cuda" else "bf16"
    try:
        res = TASKS[args.task](rank, world, dev, backend, args)
        if rank == 0:
            res.update(task=args.task, world=world, backend=backend, device=str(dev),
                       device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                       torch=torch.__version__)
            with open(args.out + ".part", "w") as f:
                json.dump(res, f)
            os.replace(args.out + ".part", args.out)
        dist.barrier()  # no rank tears down while another still talks to it
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
