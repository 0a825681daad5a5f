"""What the lesson's torchrun tasks (dist_run.py) measure with, on every rank: times across ranks (each call's time
the slowest rank's, several functions in interleaved rounds), one training step of the lesson's model, the host's share
of a step, profiler timelines, and the bytes a rank holds."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from gpucourse.lessons.l10_training_scale import model as M


def sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev, reps: int, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` across ``reps`` calls, each call's time the slowest rank's (a collective ends when
    its last rank does); ranks start each call together after a barrier."""
    return timed_rounds({"fn": fn}, dev, reps, warmup)["fn"]


def timed_rounds(fns: dict, dev, reps: int, warmup: int = 3) -> dict:
    """Median seconds of each of ``fns`` ({name: fn}), timed in interleaved rounds (one call of each per round, in
    turn), so that whatever drifts during the run (clocks, temperature, a neighbour's load) falls on all of them alike.
    Each call's time is the slowest rank's, as in :func:`timed`."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    sync(dev)
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            dist.barrier()
            sync(dev)
            t0 = time.perf_counter()
            fn()
            sync(dev)
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times[name].append(float(t))
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


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


def local_bytes(tensors) -> int:
    from torch.distributed.tensor import DTensor

    total = 0
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        total += t.numel() * t.element_size()
    return total


def state_bytes(model, opt) -> dict:
    return {"parameters": local_bytes(model.parameters()),
            "gradients": local_bytes(p.grad for p in model.parameters()),
            "optimizer": local_bytes(t for s in opt.state.values() for t in s.values()
                                      if isinstance(t, torch.Tensor) and t.dim() > 0)}


def config_for(backend: str, precision: str) -> dict:
    return M.config(M.GPU_CONFIG if backend == "nccl" else M.CPU_CONFIG, precision=precision)


def train_step(model, opt, x, y, cfg):
    with M.autocast(cfg, x.device):
        loss = ((model(x) - y) ** 2).mean()
    M.backward(model, loss)  # fp16: through the model's GradScaler
    M.step(model, opt)
    return loss


def timeline(prof, dev) -> list:
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


def profile_fwd_bwd(net, x, y, cfg, dev) -> list:
    """The timeline (see :func:`timeline`) of one forward and backward, after a full step."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    sync(dev)
    with profile(activities=acts) as prof:
        with M.autocast(cfg, dev):
            loss = ((net(x) - y) ** 2).mean()
        M.backward(net, loss)
        sync(dev)
    return timeline(prof, dev)


def guarded(fn) -> dict:
    """``fn()``, or {"error": ...} where it raised (on every rank alike): an optional measurement's failure keeps the
    rest of the task's results."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:2000]}


def host_s(net, opt, x, y, cfg, dev, reps: int = 5) -> float:
    """Median seconds for the step's Python call to return (the host issuing its work, and any wait the host does
    inside it), the device synchronized before and after each: near the step's time, the host is what limits it."""
    times = []
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        train_step(net, opt, x, y, cfg)
        times.append(time.perf_counter() - t0)
        sync(dev)
    return sorted(times)[len(times) // 2]


def cpu_top(net, opt, x, y, cfg, dev, rows: int = 12) -> list:
    """The host's busiest operations in one step (profiler, self CPU time): (name, calls, ms)."""
    from torch.profiler import ProfilerActivity, profile

    sync(dev)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_step(net, opt, x, y, cfg)
        sync(dev)
    ev = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:rows]
    return [(e.key[:80], e.count, e.self_cpu_time_total / 1e3) for e in ev]
