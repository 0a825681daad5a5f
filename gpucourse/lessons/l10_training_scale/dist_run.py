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
import gc
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


# DDP's settings the lesson times: its defaults, and with each bucket of gradients a view of the .grad tensors (no copy
# into the bucket before the all-reduce, nor back after it) and the graph declared static (the buckets' order is fixed
# after the first step). LESSON_DDP is what the lesson reports; the others are timed beside it on GPUs.
DDP_VARIANTS = {"default": {}, "bucket_view": {"gradient_as_bucket_view": True},
                "bucket_view+static_graph": {"gradient_as_bucket_view": True, "static_graph": True}}
LESSON_DDP = "bucket_view+static_graph"


def _ddp(model, dev, **kw):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None, **kw)


def _profile_fwd_bwd(net, x, y, cfg, dev) -> list:
    """The timeline (see :func:`_timeline`) of one forward and backward, after a full step."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    sync(dev)
    with profile(activities=acts) as prof:
        with M.autocast(cfg, dev):
            loss = ((net(x) - y) ** 2).mean()
        M.backward(net, loss)
        sync(dev)
    return _timeline(prof, dev)


def _guarded(fn) -> dict:
    """``fn()``, or {"error": ...} where it raised (on every rank alike): an optional measurement's failure keeps the
    rest of the task's results."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:2000]}


def _ddp_compiled(cfg, dev, rank, x, y) -> dict:
    """The same weak-scaling comparison with the model compiled (``torch.compile`` of the module, and of the DDP
    wrapper, as PyTorch's DDP notes say: dynamo splits the graph at the buckets' boundaries so that each bucket's
    all-reduce still starts during backward). Compiling fuses the elementwise work and takes most of the host's
    per-operation cost off the step, on both sides alike."""
    alone, alone_opt, _, _ = M.make(cfg, dev, seed=rank)
    model, _, _, _ = M.make(cfg, dev, seed=rank)
    ddp = _ddp(model, dev, **DDP_VARIANTS[LESSON_DDP])
    ddp_opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    calone, cddp = torch.compile(alone), torch.compile(ddp)
    t0 = time.perf_counter()
    for net, opt in ((calone, alone_opt), (cddp, ddp_opt)):
        _step(net, opt, x, y, cfg)
    sync(dev)
    compile_s = time.perf_counter() - t0
    t = timed_rounds({"alone": lambda: _step(calone, alone_opt, x, y, cfg),
                      "ddp": lambda: _step(cddp, ddp_opt, x, y, cfg)}, dev, reps=30)
    return {"alone_s": t["alone"], "ddp_s": t["ddp"], "weak_scaling_efficiency": t["alone"] / t["ddp"],
            "compile_s": compile_s, "host_s": {"alone": _host_s(calone, alone_opt, x, y, cfg, dev),
                                               "ddp": _host_s(cddp, ddp_opt, x, y, cfg, dev)},
            "timeline": _profile_fwd_bwd(cddp, x, y, cfg, dev)}


def task_ddp(rank, world, dev, backend, args) -> dict:
    cfg = _cfg(backend, args.precision)
    out = {"config": cfg}
    # Same gradients: DDP on a 1/N share of the batch per rank against one process on the whole batch (float64 on
    # the CPU, the model's own dtype on a GPU).
    small = M.config(M.CPU_CONFIG, precision="fp32")
    dtype = torch.float64
    ref, _, xs, ys = M.make(dict(small, batch=small["batch"] * world), dev, seed=7)
    ref = ref.to(dtype)
    xs, ys = xs.to(dtype), ys.to(dtype)
    net = _ddp(M.Model(small).to(dev).to(dtype), dev, **DDP_VARIANTS[LESSON_DDP])
    net.module.load_state_dict(ref.state_dict())
    ((ref(xs) - ys) ** 2).mean().backward()
    share = slice(rank * small["batch"], (rank + 1) * small["batch"])
    ((net(xs[share]) - ys[share]) ** 2).mean().backward()  # DDP averages the ranks' gradients
    worst = max(float((p.grad - q.grad).norm() / q.grad.norm()) for p, q in zip(net.module.parameters(),
                                                                               ref.parameters()))
    out["grad_rel_diff_vs_one_process"] = worst
    out["ddp_bucket_cap_mb"] = 25
    out["ddp_variant"], out["ddp_variants"] = LESSON_DDP, DDP_VARIANTS
    del net, ref
    # Weak scaling: each rank a full batch of cfg["batch"]. "alone" is the same step without DDP, run on every rank
    # at once (the same per-rank work, the same machine state); the DDP variants each wrap a copy of the model. All
    # are timed in interleaved rounds.
    variants = DDP_VARIANTS if backend == "nccl" else {k: DDP_VARIANTS[k] for k in ("default", LESSON_DDP)}
    alone, alone_opt, x, y = M.make(cfg, dev, seed=rank)
    nets = {}
    for name, kw in variants.items():
        model, _, _, _ = M.make(cfg, dev, seed=rank)
        ddp = _ddp(model, dev, **kw)
        nets[name] = (ddp, torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=dev.type == "cuda"))
    fns = {"alone": lambda: _step(alone, alone_opt, x, y, cfg)}
    fns.update({name: (lambda n=n, o=o: _step(n, o, x, y, cfg)) for name, (n, o) in nets.items()})
    t = timed_rounds(fns, dev, reps=30 if backend == "nccl" else 3)
    out["alone_s"], out["ddp_s"] = t["alone"], t[LESSON_DDP]
    out["weak_scaling_efficiency"] = t["alone"] / t[LESSON_DDP]
    out["variants_s"] = {name: t[name] for name in variants}
    if dev.type == "cuda":  # how long the host takes to issue a step (near the step's time: the host limits it)
        out["host_s"] = {"alone": _host_s(alone, alone_opt, x, y, cfg, dev),
                         LESSON_DDP: _host_s(*nets[LESSON_DDP], x, y, cfg, dev)}
    out["variants_efficiency"] = {name: t["alone"] / t[name] for name in variants}
    if args.compile and dev.type == "cuda":
        out["compiled"] = _guarded(lambda: _ddp_compiled(cfg, dev, rank, x, y))
    lesson = nets[LESSON_DDP][0]
    _step(lesson, nets[LESSON_DDP][1], x, y, cfg)
    out["timeline"] = _profile_fwd_bwd(lesson, x, y, cfg, dev)
    if dev.type == "cuda":
        out["timeline_alone"] = _profile_fwd_bwd(alone, x, y, cfg, dev)
        out["timeline_default"] = _profile_fwd_bwd(nets["default"][0], x, y, cfg, dev)
        torch.cuda.reset_peak_memory_stats(dev)
        _step(lesson, nets[LESSON_DDP][1], x, y, cfg)
        sync(dev)
        out["ddp_peak_bytes"] = torch.cuda.max_memory_allocated(dev)  # (every variant's model is resident)
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


FSDP_KINDS = ("ddp", "fsdp2", "fsdp2_tuned", "fsdp2_two_units", "fsdp2_one_unit")
FSDP_KINDS_CPU = ("ddp", "fsdp2", "fsdp2_tuned")


def _fsdp2_units(model, cfg, groups: int):
    """``fully_shard`` on ``groups`` groups of consecutive blocks (one all-gather and one reduce-scatter per group),
    then on the model; bf16 (fp16) gathers and float32 reductions as in :func:`_fsdp2`. One group: the whole model
    is one unit, gathered once per step and kept until backward ends (the states stay sharded)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw = {}
    if cfg["precision"] in ("bf16", "fp16"):
        low = torch.bfloat16 if cfg["precision"] == "bf16" else torch.float16
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    blocks = list(model.blocks)
    if groups > 1:
        size = -(-len(blocks) // groups)
        for i in range(0, len(blocks), size):
            fully_shard(blocks[i:i + size], reshard_after_forward=i + size < len(blocks), **kw)
    return fully_shard(model, reshard_after_forward=groups > 1, **kw)


def _host_s(net, opt, x, y, cfg, dev, reps: int = 5) -> float:
    """Median seconds for the step's Python call to return (the host issuing its work, and any wait the host does
    inside it), the device synchronized before and after each: near the step's time, the host is what limits it."""
    times = []
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        _step(net, opt, x, y, cfg)
        times.append(time.perf_counter() - t0)
        sync(dev)
    return sorted(times)[len(times) // 2]


def _cpu_top(net, opt, x, y, cfg, dev, rows: int = 12) -> list:
    """The host's busiest operations in one step (profiler, self CPU time): (name, calls, ms)."""
    from torch.profiler import ProfilerActivity, profile

    sync(dev)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _step(net, opt, x, y, cfg)
        sync(dev)
    ev = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:rows]
    return [(e.key[:80], e.count, e.self_cpu_time_total / 1e3) for e in ev]


def _fsdp2(model, cfg, tuned: bool):
    """``fully_shard`` on each block, then on the model. ``tuned``: parameters all-gathered in bf16 (fp16) and
    gradients reduce-scattered in float32 (``MixedPrecisionPolicy``: the same arithmetic as autocast over float32
    weights, half the bytes gathered), each block's all-gather issued one block ahead in forward (backward prefetches
    by default), and the last block kept gathered after forward, since backward starts with it."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw = {}
    if tuned and cfg["precision"] in ("bf16", "fp16"):
        low = torch.bfloat16 if cfg["precision"] == "bf16" else torch.float16
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    blocks = list(model.blocks)
    for i, blk in enumerate(blocks):
        fully_shard(blk, reshard_after_forward=not (tuned and i == len(blocks) - 1), **kw)
    net = fully_shard(model, **kw)
    if tuned:
        for a, b in zip(blocks, blocks[1:]):
            a.set_modules_to_forward_prefetch([b])
    return net


def _fsdp_compiled(cfg, dev, rank, build) -> dict:
    """DDP compiled against FSDP2 with every block compiled before ``fully_shard`` wraps it (the order PyTorch's
    FSDP2 examples use: each block one compiled graph, FSDP2's all-gathers and reduce-scatters around it), per block
    and as one unit; step times interleaved, the host's time, peaks."""
    res = {}
    nets = {}
    for kind in ("ddp", "fsdp2_tuned", "fsdp2_one_unit"):
        model, _, x, y = M.make(cfg, dev, seed=rank)
        for blk in model.blocks:
            blk.compile()
        if kind == "ddp":
            net = _ddp(model, dev, **DDP_VARIANTS[LESSON_DDP])
        elif kind == "fsdp2_tuned":
            net = _fsdp2(model, cfg, True)
        else:
            net = _fsdp2_units(model, cfg, 1)
        nets[kind] = (net, torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True), x, y)
    for kind, (net, opt, x, y) in nets.items():
        _step(net, opt, x, y, cfg)  # compiles
        sync(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
        _step(net, opt, x, y, cfg)
        sync(dev)
        res[kind] = {"peak_over_resident_bytes": torch.cuda.max_memory_allocated(dev) - before}
    t = timed_rounds({k: (lambda b=b: _step(b[0], b[1], b[2], b[3], cfg)) for k, b in nets.items()}, dev, reps=20)
    for kind, (net, opt, x, y) in nets.items():
        res[kind].update(step_s=t[kind], host_s=_host_s(net, opt, x, y, cfg, dev))
    del nets
    torch.cuda.empty_cache()
    return res


def task_fsdp(rank, world, dev, backend, args) -> dict:
    """DDP against FSDP2, per rank: bytes of parameters, gradients and AdamW state held, and on a GPU the peak of a
    step, its time and the GPU's busy time in it. Two configurations: "activations", the lesson's batch without
    checkpointing (activations dominate the peak), and "states", one sequence per rank with every block checkpointed
    (parameters, gradients and AdamW's state dominate: what FSDP2 shards); with ``--wide`` (GPUs) also
    "states_wide", the same at width 2048 (four times the parameters). Kinds: DDP as the lesson runs it,
    ``fully_shard`` per block with its
    defaults, tuned (:func:`_fsdp2`), and on GPUs fewer units (:func:`_fsdp2_units`). Peaks are measured with one
    model resident at a time; the step times in interleaved rounds with all of them resident."""
    gpu = dev.type == "cuda"
    kinds = FSDP_KINDS if gpu else FSDP_KINDS_CPU
    out = {"config": _cfg(backend, args.precision), "kinds": kinds, "peak_above_resident": True}

    def build(kind, cfg):
        model, _, x, y = M.make(cfg, dev, seed=rank)
        if kind == "ddp":
            net = _ddp(model, dev, **DDP_VARIANTS[LESSON_DDP])
        elif kind in ("fsdp2", "fsdp2_tuned"):
            net = _fsdp2(model, cfg, kind == "fsdp2_tuned")
        else:
            net = _fsdp2_units(model, cfg, 2 if kind == "fsdp2_two_units" else 1)
        return net, torch.optim.AdamW(net.parameters(), lr=1e-4, fused=gpu or kind == "ddp"), x, y

    for regime in ("activations", "states") + (("states_wide",) if gpu and args.wide else ()):
        cfg = dict(_cfg(backend, args.precision))
        if regime.startswith("states"):
            cfg.update(batch=1, checkpoint="block")
        if regime == "states_wide":
            cfg.update(d=2 * cfg["d"], heads=2 * cfg["heads"])
        out[f"{regime}_config"] = cfg
        out[regime] = {}
        for kind in kinds:  # memory, one model at a time
            if gpu:  # what is still allocated now (anything an earlier measurement left) is not this model's
                gc.collect()
                torch.cuda.empty_cache()
                resident = torch.cuda.memory_allocated(dev)
            net, opt, x, y = build(kind, cfg)
            with M.autocast(cfg, dev):
                loss = ((net(x) - y) ** 2).mean()
            M.backward(net, loss)
            held = _state_bytes(net.module if kind == "ddp" else net, opt)  # gradients, before the step
            M.step(net, opt)  # and zero_grad: the optimizer's state is what is counted next
            held["optimizer"] = _state_bytes(net.module if kind == "ddp" else net, opt)["optimizer"]
            del loss
            res = {"held_bytes": held}
            if gpu:
                sync(dev)
                torch.cuda.reset_peak_memory_stats(dev)
                _step(net, opt, x, y, cfg)
                sync(dev)
                res["peak_bytes"] = torch.cuda.max_memory_allocated(dev) - resident
            out[regime][kind] = res
            del net, opt, x, y
            if gpu:
                torch.cuda.empty_cache()
        built = {kind: build(kind, cfg) for kind in kinds}  # time, all resident, interleaved
        fns = {kind: (lambda b=b: _step(b[0], b[1], b[2], b[3], cfg)) for kind, b in built.items()}
        t = timed_rounds(fns, dev, reps=20 if backend == "nccl" else 2)
        for kind, (net, opt, x, y) in built.items():
            out[regime][kind]["step_s"] = t[kind]
            if gpu:
                out[regime][kind]["host_s"] = _host_s(net, opt, x, y, cfg, dev)
                if regime == "activations" and kind in ("ddp", "fsdp2_tuned", "fsdp2_one_unit"):
                    out[regime][kind]["cpu_top"] = _cpu_top(net, opt, x, y, cfg, dev)
        del built, fns
        if gpu:
            torch.cuda.empty_cache()
    if args.compile and gpu:  # last: compiled graphs keep references to their models
        out["compiled"] = _guarded(lambda: _fsdp_compiled(out["activations_config"], dev, rank, build))
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
    ap.add_argument("--compile", action="store_true", help="GPU: also time the model compiled (ddp, fsdp)")
    ap.add_argument("--wide", action="store_true",
                    help="GPU: fsdp also at width 2048 (the recorded run's third regime)")
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
