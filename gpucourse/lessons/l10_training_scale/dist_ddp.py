"""The lesson's ``ddp`` task (run by dist_run.py on every rank): DistributedDataParallel gives the same gradients as
one process on the whole batch; its step time against one process alone (weak scaling), for the DDP settings the
lesson compares, compiled or not; a profiler timeline of one step."""
from __future__ import annotations

import time

import torch

from gpucourse.lessons.l10_training_scale import model as M
from gpucourse.lessons.l10_training_scale.dist_measure import (config_for, guarded, host_s, profile_fwd_bwd, sync,
                                                              timed_rounds, train_step)

# DDP's settings the lesson times: its defaults, and with each bucket of gradients a view of the .grad tensors (no copy
# into the bucket before the all-reduce, nor back after it) and the graph declared static (the buckets' order is fixed
# after the first step). LESSON_DDP is what the lesson reports; the others are timed beside it on GPUs.
DDP_VARIANTS = {"default": {}, "bucket_view": {"gradient_as_bucket_view": True},
                "bucket_view+static_graph": {"gradient_as_bucket_view": True, "static_graph": True}}
LESSON_DDP = "bucket_view+static_graph"


def wrap_ddp(model, dev, **kw):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None, **kw)


def _ddp_compiled(cfg, dev, rank, x, y) -> dict:
    """The same weak-scaling comparison with the model compiled (``torch.compile`` of the module, and of the DDP
    wrapper, as PyTorch's DDP notes say: dynamo splits the graph at the buckets' boundaries so that each bucket's
    all-reduce still starts during backward). Compiling fuses the elementwise work and takes most of the host's
    per-operation cost off the step, on both sides alike."""
    alone, alone_opt, _, _ = M.make(cfg, dev, seed=rank)
    model, _, _, _ = M.make(cfg, dev, seed=rank)
    ddp = wrap_ddp(model, dev, **DDP_VARIANTS[LESSON_DDP])
    ddp_opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    calone, cddp = torch.compile(alone), torch.compile(ddp)
    t0 = time.perf_counter()
    for net, opt in ((calone, alone_opt), (cddp, ddp_opt)):
        train_step(net, opt, x, y, cfg)
    sync(dev)
    compile_s = time.perf_counter() - t0
    t = timed_rounds({"alone": lambda: train_step(calone, alone_opt, x, y, cfg),
                      "ddp": lambda: train_step(cddp, ddp_opt, x, y, cfg)}, dev, reps=30)
    return {"alone_s": t["alone"], "ddp_s": t["ddp"], "weak_scaling_efficiency": t["alone"] / t["ddp"],
            "compile_s": compile_s, "host_s": {"alone": host_s(calone, alone_opt, x, y, cfg, dev),
                                               "ddp": host_s(cddp, ddp_opt, x, y, cfg, dev)},
            "timeline": profile_fwd_bwd(cddp, x, y, cfg, dev)}


def task_ddp(rank, world, dev, backend, args) -> dict:
    cfg = config_for(backend, args.precision)
    out = {"config": cfg}
    # Same gradients: DDP on a 1/N share of the batch per rank against one process on the whole batch (float64 on
    # the CPU, the model's own dtype on a GPU).
    small = M.config(M.CPU_CONFIG, precision="fp32")
    dtype = torch.float64
    ref, _, xs, ys = M.make(dict(small, batch=small["batch"] * world), dev, seed=7)
    ref = ref.to(dtype)
    xs, ys = xs.to(dtype), ys.to(dtype)
    net = wrap_ddp(M.Model(small).to(dev).to(dtype), dev, **DDP_VARIANTS[LESSON_DDP])
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
        ddp = wrap_ddp(model, dev, **kw)
        nets[name] = (ddp, torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=dev.type == "cuda"))
    fns = {"alone": lambda: train_step(alone, alone_opt, x, y, cfg)}
    fns.update({name: (lambda n=n, o=o: train_step(n, o, x, y, cfg)) for name, (n, o) in nets.items()})
    t = timed_rounds(fns, dev, reps=30 if backend == "nccl" else 3)
    out["alone_s"], out["ddp_s"] = t["alone"], t[LESSON_DDP]
    out["weak_scaling_efficiency"] = t["alone"] / t[LESSON_DDP]
    out["variants_s"] = {name: t[name] for name in variants}
    if dev.type == "cuda":  # how long the host takes to issue a step (near the step's time: the host limits it)
        out["host_s"] = {"alone": host_s(alone, alone_opt, x, y, cfg, dev),
                         LESSON_DDP: host_s(*nets[LESSON_DDP], x, y, cfg, dev)}
    out["variants_efficiency"] = {name: t["alone"] / t[name] for name in variants}
    if args.compile and dev.type == "cuda":
        out["compiled"] = guarded(lambda: _ddp_compiled(cfg, dev, rank, x, y))
    lesson = nets[LESSON_DDP][0]
    train_step(lesson, nets[LESSON_DDP][1], x, y, cfg)
    out["timeline"] = profile_fwd_bwd(lesson, x, y, cfg, dev)
    if dev.type == "cuda":
        out["timeline_alone"] = profile_fwd_bwd(alone, x, y, cfg, dev)
        out["timeline_default"] = profile_fwd_bwd(nets["default"][0], x, y, cfg, dev)
        torch.cuda.reset_peak_memory_stats(dev)
        train_step(lesson, nets[LESSON_DDP][1], x, y, cfg)
        sync(dev)
        out["ddp_peak_bytes"] = torch.cuda.max_memory_allocated(dev)  # (every variant's model is resident)
    return out
