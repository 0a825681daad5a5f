"""Lesson 08's measurements: attention written plainly against SDPA's backends and the lesson's kernel, forward and
backward, time and peak memory. Timings go through :mod:`gpucourse.timing`; each function returns plain dicts (the
notebook prints and plots them, ``bench.py`` records them). Timings are GPU only (GPURequiredError in CPU mode);
:func:`score_bytes` and :func:`sdpa_backend` run anywhere.
"""
from __future__ import annotations

import contextlib
import math

import torch

from gpucourse import device
from gpucourse.progress import progress
from gpucourse.grading import launches
from gpucourse.timing import interleaved, settle

from . import kernels

BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
# The aten op each SDPA backend runs (what :func:`sdpa_backend` looks for).
_BACKEND_OPS = {"aten._scaled_dot_product_flash_attention": "FLASH_ATTENTION",
                "aten._scaled_dot_product_flash_attention_for_cpu": "FLASH_ATTENTION (CPU)",
                "aten._scaled_dot_product_cudnn_attention": "CUDNN_ATTENTION",
                "aten._scaled_dot_product_efficient_attention": "EFFICIENT_ATTENTION",
                "aten._scaled_dot_product_attention_math": "MATH",
                "aten._scaled_dot_product_fused_attention_overrideable": "OVERRIDEABLE"}


def naive(q, k, v, causal: bool = False):
    """Attention as three torch ops: scores (B·H·S·S, written to memory), softmax (read and written again), times v."""
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def sdpa(backend: str | None = None):
    """``fn(q, k, v, causal)`` calling SDPA, restricted to one backend (None: SDPA chooses)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call(q, k, v, causal=False):
        ctx = sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext()
        with ctx:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    call.__name__ = f"sdpa[{backend or 'auto'}]"
    return call


def sdpa_backend(q, k, v, causal: bool = False) -> str:
    """Which backend SDPA runs for these inputs, read from the aten op it dispatches to."""
    with launches.recording_ops() as ops:
        sdpa()(q, k, v, causal)
    for op in ops:
        name = op.rsplit(".", 1)[0]
        if name in _BACKEND_OPS:
            return _BACKEND_OPS[name]
    return "unknown (" + ", ".join(sorted(ops)[:4]) + ")"


def score_bytes(b: int, h: int, s: int, dtype=torch.float16) -> int:
    """Bytes of one B·H·S·S score matrix: what attention written plainly writes to memory, and softmax again."""
    return b * h * s * s * torch.finfo(dtype).bits // 8


def flops(b: int, h: int, s: int, d: int, causal: bool) -> float:
    """Forward flops: two matmuls of 2·S·S·D per head; causal counts half (as the issue's table and FA papers do)."""
    return 4 * b * h * s * s * d / (2 if causal else 1)


def inputs(b, h, s, d, dtype=torch.float16, grad=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=g).requires_grad_(grad) for _ in range(3)]


def peak_extra_mb(fn, *args) -> float:
    """MiB allocated beyond what was allocated before the call, at its peak (the output included). One untimed
    call first, so an autotuner's benchmarking buffers (first call at a new shape) are not counted."""
    fn(*args)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def _ours(q, k, v, causal=False):
    return kernels.forward(q, k, v, causal)[0]


def implementations(s: int, naive_limit_bytes: float = 8e9, b: int = 1, h: int = 16) -> dict:
    """name -> fn(q, k, v, causal): the lesson's kernel, each SDPA backend, naive (while its scores fit)."""
    impls = {"ours (Triton)": _ours, "SDPA (its choice)": sdpa()}
    for name in BACKENDS:
        if name == "MATH" and score_bytes(b, h, s, torch.float32) > naive_limit_bytes / 2:
            continue
        impls[f"SDPA {name}"] = sdpa(name)
    if score_bytes(b, h, s) <= naive_limit_bytes:
        impls["naive"] = naive
    return impls


def _time(impls: dict, args: tuple, nflops: float, rounds: int, rep_ms: float) -> dict:
    """TFLOP/s and ms of each implementation, interleaved; an implementation that fails is skipped with why."""
    ok, skipped = {}, {}
    for name, fn in impls.items():
        try:
            fn(*args)
            ok[name] = (lambda fn=fn: fn(*args))
        except Exception as exc:  # a backend that does not support this shape or GPU
            skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    torch.cuda.synchronize()
    res = interleaved(ok, rounds=rounds, flops=nflops, dtype=args[0].dtype, rep_ms=rep_ms)
    return {"ms": {n: r.median_ms for n, r in res.items()}, "tflops": {n: r.typical.tflops for n, r in res.items()},
            "skipped": skipped}


def forward_point(b=4, h=16, s=4096, d=64, causal=False, rounds=3, rep_ms=100, with_math=True) -> dict:
    """One shape: every implementation timed in one run (interleaved rounds) and the backend SDPA picks."""
    device.require_gpu("Timing attention")
    q, k, v = inputs(b, h, s, d)
    impls = {"ours (Triton)": _ours, **{f"SDPA {n}": sdpa(n) for n in BACKENDS if n != "MATH" or with_math},
             "naive": naive}
    settle(lambda: _ours(q, k, v, causal), seconds=0.5)
    out = _time(impls, (q, k, v, causal), flops(b, h, s, d, causal), rounds, rep_ms)
    out.update(shape=dict(b=b, h=h, s=s, d=d, causal=causal), sdpa_default=sdpa_backend(q, k, v, causal))
    return out


def forward_sweep(seqs=(512, 1024, 2048, 4096, 8192, 16384), dims=(64, 128), causals=(False, True), tokens=16384,
                  h=16, rounds=1, rep_ms=60) -> list:
    """TFLOP/s over S at a fixed number of tokens (B = tokens / S), every implementation that fits."""
    device.require_gpu("The attention sweep")
    rows = []
    points = [(d, causal, s) for d in dims for causal in causals for s in seqs]
    for d, causal, s in progress(points, "attention sweep", label=lambda p: f"D={p[0]}, causal={p[1]}, S={p[2]}"):
        b = max(1, tokens // s)
        q, k, v = inputs(b, h, s, d)
        r = _time(implementations(s, b=b, h=h), (q, k, v, causal), flops(b, h, s, d, causal), rounds, rep_ms)
        rows.append(dict(s=s, d=d, b=b, h=h, causal=causal, **r))
        del q, k, v
    return rows


def memory(s=16384, d=128, b=1, h=16, causal=False) -> dict:
    """Peak extra MiB of one forward call: ours, each SDPA backend, naive (if it fits)."""
    device.require_gpu("Measuring attention's memory")
    q, k, v = inputs(b, h, s, d)
    out = {}
    for name, fn in implementations(s, naive_limit_bytes=20e9, b=b, h=h).items():
        try:
            out[name] = peak_extra_mb(fn, q, k, v, causal)
        except Exception as exc:
            out[name] = None
            out.setdefault("skipped", {})[name] = f"{type(exc).__name__}"
    out["output_mb"] = q.numel() * q.element_size() / 2**20
    out["shape"] = dict(b=b, h=h, s=s, d=d, causal=causal)
    return out


def naive_memory_sweep(seqs=(1024, 2048, 4096, 8192), b=1, h=16, d=64) -> list:
    """Time and peak memory of naive attention and SDPA (its own choice) as S grows."""
    device.require_gpu("The naive-attention sweep")
    rows = []
    for s in progress(seqs, "naive-attention sweep"):
        q, k, v = inputs(b, h, s, d)
        auto = sdpa()
        t = _time({"naive": naive, "SDPA": auto}, (q, k, v, False), flops(b, h, s, d, False), 1, 50)
        rows.append(dict(s=s, score_mb=score_bytes(b, h, s) / 2**20, ms=t["ms"],
                         peak_mb={"naive": peak_extra_mb(naive, q, k, v), "SDPA": peak_extra_mb(auto, q, k, v)},
                         backend=sdpa_backend(q, k, v)))
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# Backward.


def _train_step(fn):
    def step(q, k, v, do, causal):
        q.grad = k.grad = v.grad = None
        fn(q, k, v, causal).backward(do)
    return step


def backward_point(b=4, h=16, s=4096, d=64, causal=False, rounds=3, rep_ms=100) -> dict:
    """Backward time (forward + backward minus forward, each measured) of ours and SDPA's FLASH backend, and the
    TFLOP/s of the backward alone (2.5x the forward's flops: five matmuls to its two)."""
    device.require_gpu("Timing the backward pass")
    q, k, v = inputs(b, h, s, d, grad=True)
    do = torch.randn_like(q)
    flash = sdpa("FLASH_ATTENTION")
    impls = {"ours (Triton)": kernels.attention, "SDPA FLASH_ATTENTION": flash}
    fwd = {n: (lambda fn=fn: fn(q.detach(), k.detach(), v.detach(), causal)) for n, fn in impls.items()}
    both = {n: (lambda fn=fn: _train_step(fn)(q, k, v, do, causal)) for n, fn in impls.items()}
    for f in (*fwd.values(), *both.values()):
        f()
    settle(both["ours (Triton)"], seconds=0.5)
    nflops = flops(b, h, s, d, causal)
    r_f = interleaved(fwd, rounds=rounds, rep_ms=rep_ms)
    r_b = interleaved(both, rounds=rounds, rep_ms=rep_ms)
    bwd_ms = {n: r_b[n].median_ms - r_f[n].median_ms for n in impls}
    return {"shape": dict(b=b, h=h, s=s, d=d, causal=causal), "fwd_ms": {n: r_f[n].median_ms for n in impls},
            "fwd_bwd_ms": {n: r_b[n].median_ms for n in impls}, "bwd_ms": bwd_ms,
            "bwd_tflops": {n: 2.5 * nflops / (ms * 1e9) for n, ms in bwd_ms.items()}}


def check_backward(b=1, h=2, s=37, d=64, causal=False, dtype=torch.float16, seed=0) -> dict:
    """The kernel's gradients against autograd through attention in float64: max error relative to max|grad|."""
    g = torch.Generator().manual_seed(seed)
    dev = device.torch_device()
    q, k, v = (torch.randn(b, h, s, d, generator=g).to(dtype).to(dev) for _ in range(3))
    do = torch.randn(b, h, s, d, generator=g).to(dtype).to(dev)
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    kernels.attention(*mine, causal).backward(do)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    kernels.reference(*ref, causal).backward(do.double())
    return {name: float((a.grad.double() - r.grad).abs().max() / r.grad.abs().max())
            for name, a, r in zip("qkv", mine, ref)}


def configs_at(s=4096, d=64, causal=False, b=4, h=16, rep_ms=60) -> list:
    """The forward's TFLOP/s with each config the autotuner tries for this D, at one shape: what blocks, warps and
    pipeline stages buy."""
    device.require_gpu("Timing the configs")
    q, k, v = inputs(b, h, s, d)
    rows = []
    fn = kernels.attn_fwd_kernel.fn  # the kernel under the autotuner
    o = torch.empty_like(q)
    lse = torch.empty((b * h, s), device="cuda", dtype=torch.float32)
    for bm, bn, warps, stages in progress(kernels._TUNED[d], f"configs at D={d}"):
        def run(bm=bm, bn=bn, warps=warps, stages=stages):
            fn[(triton_cdiv(s, bm), b * h)](q, k, v, o, lse, kernels.LOG2E / math.sqrt(d), s, h, kernels.s_key(s),
                                           *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], D=d,
                                           CAUSAL=causal, UPCAST=False, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps,
                                           num_stages=stages)
        try:
            run()
        except Exception as exc:  # out of shared memory, say
            rows.append(dict(block_m=bm, block_n=bn, warps=warps, stages=stages, tflops=None, why=type(exc).__name__))
            continue
        r = interleaved({"cfg": run}, rounds=1, flops=flops(b, h, s, d, causal), dtype=q.dtype, rep_ms=rep_ms)["cfg"]
        rows.append(dict(block_m=bm, block_n=bn, warps=warps, stages=stages, tflops=r.typical.tflops))
    return rows


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def memory_sweep(seqs=(1024, 2048, 4096, 8192, 16384), d=128, b=1, h=16) -> list:
    """Peak extra MiB of one forward call as S grows: ours, SDPA (its choice), naive (while its scores fit)."""
    device.require_gpu("The memory sweep")
    rows = []
    for s in progress(seqs, "memory sweep"):
        q, k, v = inputs(b, h, s, d)
        impls = {"ours (Triton)": _ours, "SDPA (its choice)": sdpa()}
        if 2 * score_bytes(b, h, s) <= 20e9:
            impls["naive"] = naive
        rows.append(dict(s=s, peak_mb={n: peak_extra_mb(fn, q, k, v) for n, fn in impls.items()},
                         output_mb=q.numel() * q.element_size() / 2**20))
        del q, k, v
    return rows
