"""What lesson 11's notebook reads from a run: the issue's targets, where one decode step's GPU time goes (kernels by
category, from torch.profiler), and how many operations one eager step dispatches."""
from __future__ import annotations

import torch

from . import decode, model

TARGETS = (("fraction_of_floor", "bf16 decode at context 512: share of the bandwidth floor", 0.70),
           ("over_hf_static", "best ladder step / generate() with a static cache", 2.5),
           ("over_hf_default", "best ladder step / generate() with its default cache", 10.0),
           ("split_kv_over_best_sdpa", "split-KV kernel / the fastest SDPA backend at context 8192", 1.5),
           ("int4_over_bf16", "int4 weights / bf16 weights, both compiled (tokens/s)", 1.8))


def targets(**figures) -> list:
    """The issue's targets, evaluated (``benchmarks.target``) for the ``figures`` given by name (the first item of
    each :data:`TARGETS` row; a figure left out or None is not evaluated)."""
    from gpucourse import benchmarks

    unknown = set(figures) - {key for key, _, _ in TARGETS}
    if unknown:
        raise KeyError(f"unknown figures {sorted(unknown)}; known: {[key for key, _, _ in TARGETS]}")
    return [benchmarks.target(name, figures[key], goal) for key, name, goal in TARGETS
            if figures.get(key) is not None]


CATEGORIES = (("argmax (the next token)", ("argmax", "arg_max")),
              ("attention", ("attention", "attn", "flash", "fmha", "cudnn", "sdpa", "split_kv", "reduce_kernel")),
              ("matmul (GEMV)", ("gemm", "gemv", "nvjet", "cutlass", "xmma", "_mm_", "mm_kernel", "triton_tem",
                                 "splitk", "sm90_", "sm80_")),
              ("copies and fills", ("memcpy", "memset", "copy", "fill", "index_put", "index_copy")),
              ("other fused kernels (norms, RoPE, SiLU, adds)", ("triton_",)))


def kernel_category(name: str) -> str:
    """The category of a GPU kernel, by its name (the first of :data:`CATEGORIES` whose fragments it contains)."""
    low = name.lower()
    for category, fragments in CATEGORIES:
        if any(f in low for f in fragments):
            return category
    return "other"


TOP_NAMES, NAME_CHARS = 16, 100  # breakdown's "by_name": the kernels that take the most time, names cut to 100


def breakdown(kernels: list, tokens: int = 1) -> dict:
    """Per category, kernels and GPU microseconds per token, from ``kernels`` = [(name, microseconds)] recorded
    over ``tokens`` decode steps; also the longest matmul kernel as ``head`` (for Config.small the output head: it
    reads vocab x d, about 16 times the largest layer matrix), and ``by_name``: the :data:`TOP_NAMES` kernel names
    that take the most time, each with its category, kernels and microseconds per token (what to fuse next)."""
    out = {}
    for name, us in kernels:
        c = out.setdefault(kernel_category(name), {"kernels": 0, "us": 0.0})
        c["kernels"] += 1
        c["us"] += us
    for c in out.values():
        c["kernels"] /= tokens
        c["us"] /= tokens
    mms = [(us, name) for name, us in kernels if kernel_category(name) == "matmul (GEMV)"]
    names: dict = {}
    for name, us in kernels:
        n = names.setdefault(name[:NAME_CHARS], [0, 0.0])
        n[0] += 1
        n[1] += us
    top = sorted(names.items(), key=lambda kv: -kv[1][1])[:TOP_NAMES]
    return {"categories": dict(sorted(out.items(), key=lambda kv: -kv[1]["us"])),
            "kernels_per_token": len(kernels) / tokens, "gpu_us_per_token": sum(us for _, us in kernels) / tokens,
            "head": None if not mms else {"name": max(mms)[1], "us": max(mms)[0]},
            "by_name": [{"name": k, "category": kernel_category(k), "kernels": c / tokens, "us": us / tokens}
                        for k, (c, us) in top]}


def token_profile(weights: dict, config: model.Config, prompt, mode: str = "default",
                  backend: str = "inductor", tokens: int = 4) -> dict:
    """The kernels of ``tokens`` decode steps of the compiled static-cache step (:func:`decode.compiled`'s step,
    compiled again here: torch.compile's caches make that quick after the ladder compiled it) under
    torch.profiler, called directly rather than replayed from a CUDA graph so that every kernel is its own event;
    :func:`breakdown` of them (GPU only: None on the CPU)."""
    if prompt.device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    from gpucourse import timeline

    with torch.inference_mode():
        s = decode._Static(weights, config, prompt, "sdpa")
    fn = torch.compile(s.step, mode=mode, backend=backend, fullgraph=True)
    with torch.inference_mode():
        s.prefill()
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        with timeline.quiet_profiler(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(tokens):
                fn()
            torch.cuda.synchronize()
    kernels = [(e.name, e.time_range.elapsed_us()) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    return breakdown(kernels, tokens)


def _lanes(tl, tokens: int) -> dict:
    """Per token: the profiled window, the GPU's busy time, its idle share, kernels (a Timeline of ``tokens`` steps)."""
    start, end = tl.window
    return {"window_us": (end - start) / tokens, "gpu_busy_us": tl.gpu_busy_us() / tokens,
            "gpu_idle_fraction": tl.idle_fraction(), "gpu_events": len(tl.gpu) / tokens,
            "cpu_calls": len(tl.cpu) / tokens}


def before_after(weights: dict, config: model.Config, prompt, mode: str = "default", tokens: int = 4) -> dict:
    """The timeline of ``tokens`` decode steps before (the eager static-cache step, launched op by op) and after
    (the same step compiled and replayed from a CUDA graph, as the ladder's ``compiled`` step runs it):
    :func:`_lanes` of each, the Timelines themselves (``"timelines"``, for ``timeline.draw``), and the compiled
    step's kernels by category (:func:`token_profile`). GPU only: None on the CPU."""
    if prompt.device.type != "cuda":
        return None
    from gpucourse import timeline

    with torch.inference_mode():
        s = decode._Static(weights, config, prompt, "sdpa")
        s.prefill()

        def eager():
            for _ in range(tokens):
                s.step()

        before = timeline.profile(eager, warmup=1)
    fn = torch.compile(s.step, mode=mode, fullgraph=True)
    with torch.inference_mode():
        s.prefill()
        fn()
        torch.cuda.synchronize()
        replay = decode._capture(fn, warm=2)

        def replayed():
            for _ in range(tokens):
                replay()

        after = timeline.profile(replayed, warmup=1)
    return {"tokens": tokens, "before": _lanes(before, tokens), "after": _lanes(after, tokens),
            "kernels_after": token_profile(weights, config, prompt, mode=mode, tokens=tokens),
            "timelines": {"before": before, "after": after}}


# aten operations that only make a view or allocate: no kernel runs
NO_KERNEL = {"view", "_unsafe_view", "reshape", "_reshape_alias", "detach", "empty", "empty_like", "alias", "t",
             "transpose", "unsqueeze", "squeeze", "expand", "slice", "select", "as_strided", "lift_fresh"}


def ops_per_token(weights: dict, config: model.Config, prompt) -> dict:
    """How many aten operations one eager static-cache decode step dispatches, by operation (each one at least one
    kernel launch on a GPU; views and allocations left out): counted with a TorchDispatchMode, on any device."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: dict = {}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = str(func.overloadpacket).removeprefix("aten.")
            # a conversion to the dtype a tensor has already returns it unchanged: no kernel
            if name not in NO_KERNEL and not (name == "to" and args and out is args[0]):
                counts[name] = counts.get(name, 0) + 1
            return out

    with torch.inference_mode():
        s = decode._Static(weights, config, prompt, "sdpa")
        s.prefill()
        with Count():
            s.step()
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
