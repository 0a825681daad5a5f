"""The lesson's tasks that shard the model across ranks (run by dist_run.py on every rank): ``fsdp`` (FSDP2's
fully_shard against DDP: bytes held and peak memory per rank, step time) and ``tp`` (a tensor-parallel MLP: the same
output as unsplit, weight bytes per rank)."""
from __future__ import annotations

import gc

import torch
import torch.nn.functional as F

from gpucourse.lessons.l10_training_scale import model as M
from gpucourse.lessons.l10_training_scale.dist_ddp import DDP_VARIANTS, LESSON_DDP, wrap_ddp
from gpucourse.lessons.l10_training_scale.dist_measure import (config_for, cpu_top, guarded, host_s, local_bytes,
                                                              state_bytes, sync, timed_rounds, train_step)

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
            net = wrap_ddp(model, dev, **DDP_VARIANTS[LESSON_DDP])
        elif kind == "fsdp2_tuned":
            net = _fsdp2(model, cfg, True)
        else:
            net = _fsdp2_units(model, cfg, 1)
        nets[kind] = (net, torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True), x, y)
    for kind, (net, opt, x, y) in nets.items():
        train_step(net, opt, x, y, cfg)  # compiles
        sync(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
        train_step(net, opt, x, y, cfg)
        sync(dev)
        res[kind] = {"peak_over_resident_bytes": torch.cuda.max_memory_allocated(dev) - before}
    t = timed_rounds({k: (lambda b=b: train_step(b[0], b[1], b[2], b[3], cfg)) for k, b in nets.items()}, dev, reps=20)
    for kind, (net, opt, x, y) in nets.items():
        res[kind].update(step_s=t[kind], host_s=host_s(net, opt, x, y, cfg, dev))
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
    out = {"config": config_for(backend, args.precision), "kinds": kinds, "peak_above_resident": True}

    def build(kind, cfg):
        model, _, x, y = M.make(cfg, dev, seed=rank)
        if kind == "ddp":
            net = wrap_ddp(model, dev, **DDP_VARIANTS[LESSON_DDP])
        elif kind in ("fsdp2", "fsdp2_tuned"):
            net = _fsdp2(model, cfg, kind == "fsdp2_tuned")
        else:
            net = _fsdp2_units(model, cfg, 2 if kind == "fsdp2_two_units" else 1)
        return net, torch.optim.AdamW(net.parameters(), lr=1e-4, fused=gpu or kind == "ddp"), x, y

    for regime in ("activations", "states") + (("states_wide",) if gpu and args.wide else ()):
        cfg = dict(config_for(backend, args.precision))
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
            held = state_bytes(net.module if kind == "ddp" else net, opt)  # gradients, before the step
            M.step(net, opt)  # and zero_grad: the optimizer's state is what is counted next
            held["optimizer"] = state_bytes(net.module if kind == "ddp" else net, opt)["optimizer"]
            del loss
            res = {"held_bytes": held}
            if gpu:
                sync(dev)
                torch.cuda.reset_peak_memory_stats(dev)
                train_step(net, opt, x, y, cfg)
                sync(dev)
                res["peak_bytes"] = torch.cuda.max_memory_allocated(dev) - resident
            out[regime][kind] = res
            del net, opt, x, y
            if gpu:
                torch.cuda.empty_cache()
        built = {kind: build(kind, cfg) for kind in kinds}  # time, all resident, interleaved
        fns = {kind: (lambda b=b: train_step(b[0], b[1], b[2], b[3], cfg)) for kind, b in built.items()}
        t = timed_rounds(fns, dev, reps=20 if backend == "nccl" else 2)
        for kind, (net, opt, x, y) in built.items():
            out[regime][kind]["step_s"] = t[kind]
            if gpu:
                out[regime][kind]["host_s"] = host_s(net, opt, x, y, cfg, dev)
                if regime == "activations" and kind in ("ddp", "fsdp2_tuned", "fsdp2_one_unit"):
                    out[regime][kind]["cpu_top"] = cpu_top(net, opt, x, y, cfg, dev)
        del built, fns
        if gpu:
            torch.cuda.empty_cache()
    if args.compile and gpu:  # last: compiled graphs keep references to their models
        out["compiled"] = guarded(lambda: _fsdp_compiled(out["activations_config"], dev, rank, build))
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
    with torch.no_grad():
        got = mlp(x)  # fc1's columns and fc2's rows split across ranks; one all-reduce of (4, 64, d) at the end
    out = {"d": d, "max_abs_diff": float((got - want).abs().max()),
           "weight_bytes_per_rank": local_bytes(mlp.parameters()),
           "weight_bytes_unsplit": sum(p.numel() * p.element_size() for p in ref),
           "all_reduce_bytes_per_forward": x.numel() * x.element_size()}
    return out
