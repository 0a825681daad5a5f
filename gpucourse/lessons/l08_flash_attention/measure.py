"""Lesson 08's measurements: attention written plainly against SDPA's backends, FlexAttention, the lesson's kernel
and the workbook's, forward and backward, time and peak memory. Timings go through :mod:`gpucourse.timing`; each
function returns plain dicts (the notebook prints and plots them, ``bench.py`` records them). Every comparison is one
interleaved run (:func:`gpucourse.timing.interleaved`: each implementation timed once per round, round after round)
and reports the median of the rounds' medians and how far the rounds were apart (:func:`spread`). Timings are GPU
only (GPURequiredError in CPU mode); :func:`score_bytes`, :func:`flops`, :func:`spread`, :func:`noise`,
:func:`refusal` and :func:`sdpa_backend` run anywhere.
"""
from __future__ import annotations

import contextlib
import math
import re
import statistics
import warnings

import torch

from gpucourse import device
from gpucourse.progress import progress
from gpucourse.grading import launches
from gpucourse.solutions import for_lesson
from gpucourse.timing import interleaved, settle, tflops as _tflops

from . import LESSON, kernels

BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
OURS = "ours (Triton)"  # the lesson's kernel, kernels.py
WORKBOOK = "workbook (Triton)"  # the solved workbook's flash_attention, solutions/08_flash_attention.ipynb
FLEX = "FlexAttention (compiled)"
SWEEP_SEQS = (1024, 4096, 16384)
SOFTCAP = 20.0  # tanh soft-capping of the scores (as Gemma 2 does): a variant no fused SDPA backend offers
# The aten op each SDPA backend runs (what :func:`sdpa_backend` looks for).
_BACKEND_OPS = {"aten._scaled_dot_product_flash_attention": "FLASH_ATTENTION",
                "aten._scaled_dot_product_flash_attention_for_cpu": "FLASH_ATTENTION (CPU)",
                "aten._scaled_dot_product_cudnn_attention": "CUDNN_ATTENTION",
                "aten._scaled_dot_product_efficient_attention": "EFFICIENT_ATTENTION",
                "aten._scaled_dot_product_attention_math": "MATH",
                "aten._scaled_dot_product_fused_attention_overrideable": "OVERRIDEABLE"}
# Warnings SDPA emits around the one that says why a backend refused: they name no reason.
_NO_REASON = ("not used because", "has been runtime disabled")


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


solutions = for_lesson(LESSON)  # the solved workbook's namespace, loaded on the first call


def workbook(q, k, v, causal=False):
    """The workbook's reference answer, ``flash_attention`` of the solved workbook: one fixed tile, every key block
    masked (what a learner writes), against the lesson's autotuned kernel with its unmasked loop."""
    return solutions()["flash_attention"](q, k, v, causal)


def _causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _softcap(score, b, h, q_idx, kv_idx):
    return SOFTCAP * torch.tanh(score / SOFTCAP)


def flex(score_mod=None):
    """``fn(q, k, v, causal)`` calling FlexAttention (``torch.nn.attention.flex_attention``) compiled by torch.compile
    with static shapes, as its documentation asks (uncompiled it is a slow reference): no mask, or a causal block
    mask built once per length, outside any timing. ``score_mod`` (optional) rewrites each score, compiled into the
    same kernel.

    Each call of ``flex()`` starts torch.compile afresh (``torch.compiler.reset()``): torch.compile keeps at most 8
    compiled versions of one function (``torch._dynamo.config.recompile_limit``) and past that runs FlexAttention
    uncompiled, tens of times slower, with only a logged warning. So make one ``flex()`` per shape, as the sweeps do;
    with ``dynamic=True`` instead it compiles once for all shapes but ran 10-40% slower on the course's H100."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.compiler.reset()
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def call(q, k, v, causal=False):
        mask = None
        if causal:
            key = (q.shape[-2], k.shape[-2], str(q.device))
            if key not in masks:
                masks[key] = create_block_mask(_causal_mask, None, None, q.shape[-2], k.shape[-2], device=q.device)
            mask = masks[key]
        return compiled(q, k, v, score_mod=score_mod, block_mask=mask)
    call.__name__ = "flex_attention"
    return call


def implementations(s: int, naive_limit_bytes: float = 8e9, b: int = 1, h: int = 16, auto: bool = False,
                    peers: bool = True) -> dict:
    """name -> fn(q, k, v, causal): the lesson's kernel, (``peers``) the workbook's kernel and FlexAttention, (``auto``)
    SDPA left to choose, each SDPA backend, MATH and naive while their S×S matrices fit under ``naive_limit_bytes``
    (MATH's are fp32, so half as many)."""
    impls = {OURS: _ours}
    if peers:
        impls[WORKBOOK] = workbook
        impls[FLEX] = flex()
    if auto:
        impls["SDPA (its choice)"] = sdpa()
    for name in BACKENDS:
        if name == "MATH" and score_bytes(b, h, s, torch.float32) > naive_limit_bytes / 2:
            continue
        impls[f"SDPA {name}"] = sdpa(name)
    if score_bytes(b, h, s) <= naive_limit_bytes:
        impls["naive"] = naive
    return impls


def refusal(exc: BaseException, messages=()) -> str:
    """One line saying why an implementation did not run: the exception, and the reasons among the warnings it
    emitted (SDPA names why it refused a backend in a warning, e.g. "Expected query, key and value to all be of
    dtype: {Half, BFloat16}"), without the warnings that give none."""
    text = str(exc).strip().splitlines()
    out = f"{type(exc).__name__}: {text[0][:120] if text else ''}".rstrip(": ")
    reasons = []
    for m in messages:
        m = str(m).split(" (Triggered internally")[0].strip()
        if m and not any(n in m for n in _NO_REASON) and m not in reasons:
            reasons.append(m[:200])
    return out + (" -- " + "; ".join(reasons) if reasons else "")


def attempt(fn, *args):
    """(result, None) if ``fn(*args)`` runs, else (None, why) with :func:`refusal`'s line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(*args), None
        except Exception as exc:  # a backend that does not support this shape, dtype or GPU
            return None, refusal(exc, [w.message for w in caught])


def spread(medians) -> float:
    """How far apart repeated measurements of one thing are: (largest - smallest) / median of the rounds' medians
    (0 for a single round)."""
    xs = list(medians)
    if len(xs) < 2:
        return 0.0
    return (max(xs) - min(xs)) / statistics.median(xs)


def noise(rows) -> dict:
    """Over every implementation of every row (each row with a ``spread`` dict, name -> spread): the median spread,
    the largest, and where the largest was."""
    items = [(sp, name, r) for r in rows for name, sp in r.get("spread", {}).items()]
    if not items:
        return {"median": 0.0, "max": 0.0, "where": None, "n": 0}
    worst = max(items, key=lambda t: t[0])
    where = {k: worst[2][k] for k in ("s", "d", "causal", "b") if k in worst[2]}
    if not where and "shape" in worst[2]:
        where = dict(worst[2]["shape"])
    return {"median": statistics.median(t[0] for t in items), "max": worst[0], "where": dict(where, name=worst[1]),
            "n": len(items)}


def _time(impls: dict, args: tuple, nflops: float, rounds: int, rep_ms: float, warmup_ms: float = 25) -> dict:
    """ms (median of the rounds' medians), TFLOP/s (from that median) and spread of each implementation, timed in one
    interleaved run; one that refuses is left out, with why."""
    ok, skipped = {}, {}
    for name, fn in impls.items():
        _, why = attempt(fn, *args)
        if why is None:
            ok[name] = (lambda fn=fn: fn(*args))
        else:
            skipped[name] = why
    torch.cuda.synchronize()
    res = interleaved(ok, rounds=rounds, flops=nflops, dtype=args[0].dtype, rep_ms=rep_ms, warmup_ms=warmup_ms)
    ms = {n: r.median_ms for n, r in res.items()}
    return {"ms": ms, "tflops": {n: _tflops(nflops, m) for n, m in ms.items()},
            "spread": {n: spread(r.medians_ms) for n, r in res.items()}, "rounds": rounds, "skipped": skipped}


def forward_point(b=4, h=16, s=4096, d=64, causal=False, rounds=3, rep_ms=100, peers=True) -> dict:
    """One shape: every implementation timed in one interleaved run, and the backend SDPA picks for it."""
    device.require_gpu("Timing attention")
    q, k, v = inputs(b, h, s, d)
    impls = implementations(s, b=b, h=h, peers=peers)
    settle(lambda: _ours(q, k, v, causal), seconds=0.5)
    out = _time(impls, (q, k, v, causal), flops(b, h, s, d, causal), rounds, rep_ms)
    out.update(shape=dict(b=b, h=h, s=s, d=d, causal=causal), sdpa_default=sdpa_backend(q, k, v, causal))
    return out


def forward_sweep(seqs=SWEEP_SEQS, dims=(64, 128), causals=(False, True), tokens=16384, h=16, rounds=3,
                  rep_ms=30, peers=True, warmup_ms=10) -> list:
    """TFLOP/s over S at a fixed number of tokens (B = tokens / S): at each point every implementation that fits,
    timed in one interleaved run of ``rounds`` rounds (each function already ran once, untimed, before the first),
    and the backend SDPA itself picks there."""
    device.require_gpu("The attention sweep")
    rows = []
    points = [(d, causal, s) for d in dims for causal in causals for s in seqs]
    for d, causal, s in progress(points, "attention sweep", label=lambda p: f"D={p[0]}, causal={p[1]}, S={p[2]}"):
        b = max(1, tokens // s)
        q, k, v = inputs(b, h, s, d)
        r = _time(implementations(s, b=b, h=h, peers=peers), (q, k, v, causal), flops(b, h, s, d, causal), rounds,
                  rep_ms, warmup_ms)
        rows.append(dict(s=s, d=d, b=b, h=h, causal=causal, sdpa_default=sdpa_backend(q, k, v, causal), **r))
        del q, k, v
    return rows


def backend_support(b=1, h=2, s=128, d=64, dtype=torch.float32, causal=False) -> dict:
    """backend -> "runs" or why SDPA refused it, for one forward call at this shape and dtype; "SDPA (its choice)"
    -> the backend SDPA picks on its own."""
    device.require_gpu("Asking SDPA's backends")
    q, k, v = inputs(b, h, s, d, dtype=dtype)
    out = {}
    for name in BACKENDS:
        _, why = attempt(sdpa(name), q, k, v, causal)
        out[name] = why or "runs"
    out["SDPA (its choice)"] = sdpa_backend(q, k, v, causal)
    return out


def sdpa_kernel_names(b=1, h=16, s=1024, d=64, causal=False) -> dict:
    """backend -> the names of the CUDA kernels one forward call runs, read with torch.profiler. The names say whose
    code runs: FlashAttention-2's ``pytorch_flash::flash_fwd_kernel``, cuDNN's generated kernels, CUTLASS's
    ``fmha_cutlassF..._sm80`` for EFFICIENT_ATTENTION."""
    from torch.profiler import ProfilerActivity, profile

    device.require_gpu("Profiling SDPA's kernels")
    q, k, v = inputs(b, h, s, d)
    out = {}
    for name in BACKENDS[:3]:
        fn = sdpa(name)
        _, why = attempt(fn, q, k, v, causal)
        if why:
            out[name] = [f"(refused: {why})"]
            continue
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(q, k, v, causal)
            torch.cuda.synchronize()
        names = {e.name for e in prof.events() if getattr(e.device_type, "name", "") == "CUDA"}
        out[name] = sorted(n for n in names if not n.startswith("Memset") and not n.startswith("Memcpy"))
    return out


PTX_MARKERS = {"wgmma.mma_async": r"\bwgmma\.mma_async\b", "mma.sync": r"\bmma\.sync\b",
               "cp.async": r"\bcp\.async\.(?!bulk)", "cp.async.bulk (TMA)": r"\bcp\.async\.bulk\b"}


def count_instructions(ptx: str) -> dict:
    """How often each instruction of :data:`PTX_MARKERS` appears in a PTX listing (wgmma: Hopper's warpgroup matmul;
    mma.sync: the Ampere-style warp matmul; cp.async: Ampere's asynchronous copy; cp.async.bulk: the TMA's copies)."""
    return {name: len(re.findall(pat, ptx)) for name, pat in PTX_MARKERS.items()}


def ptx_instructions(d=64, causal=False, s=4096, b=1, h=16) -> dict:
    """The matmul and copy instructions in the PTX Triton generated for the lesson's forward kernel (the config the
    autotuner tries first for this D), counted by :func:`count_instructions`."""
    device.require_gpu("Reading the kernel's PTX")
    q, k, v = inputs(b, h, s, d)
    o = torch.empty_like(q)
    lse = torch.empty((b * h, s), device="cuda", dtype=torch.float32)
    bm, bn, warps, stages = kernels._TUNED[d][0]
    compiled = kernels.attn_fwd_kernel.fn[(triton_cdiv(s, bm), b * h)](
        q, k, v, o, lse, kernels.LOG2E / math.sqrt(d), s, h, kernels.s_key(s), *q.stride()[:3], *k.stride()[:3],
        *v.stride()[:3], *o.stride()[:3], D=d, CAUSAL=causal, UPCAST=False, BLOCK_M=bm, BLOCK_N=bn,
        num_warps=warps, num_stages=stages)
    asm = getattr(compiled, "asm", None) or {}
    if "ptx" not in asm:
        raise RuntimeError(f"this Triton's launch returned {type(compiled).__name__}, not a compiled kernel with PTX")
    return dict(count_instructions(asm["ptx"]), config=dict(block_m=bm, block_n=bn, warps=warps, stages=stages))


def memory(s=16384, d=128, b=1, h=16, causal=False) -> dict:
    """Peak extra MiB of one forward call: ours, each SDPA backend, naive (if it fits)."""
    device.require_gpu("Measuring attention's memory")
    q, k, v = inputs(b, h, s, d)
    out = {}
    for name, fn in implementations(s, naive_limit_bytes=20e9, b=b, h=h, auto=True, peers=False).items():
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


BACKWARD_METHOD = ("backward alone: one forward, then torch.autograd.grad(out, (q, k, v), dO, retain_graph=True) "
                   "timed per call (L2 flushed before each), every implementation in one interleaved run")


def backward_point(b=4, h=16, s=4096, d=64, causal=False, rounds=3, rep_ms=30, peers=True,
                   math_limit_bytes=2e9) -> dict:
    """The backward pass alone, timed as :data:`BACKWARD_METHOD` says: the lesson's kernel, every SDPA backend that
    runs (MATH while its fp32 S×S matrices stay under ``math_limit_bytes``) and (``peers``) FlexAttention, in one
    interleaved run. TFLOP/s counts 2.5x the forward's flops (five matmuls to its two), as the FlashAttention papers
    do. Timing the backward by itself avoids the old way's difference of two medians (forward+backward minus
    forward), whose noise is that of both."""
    device.require_gpu("Timing the backward pass")
    q, k, v = inputs(b, h, s, d, grad=True)
    do = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=torch.Generator(device="cuda").manual_seed(1))
    impls = {OURS: kernels.attention}
    for name in BACKENDS:
        if name == "MATH" and score_bytes(b, h, s, torch.float32) > math_limit_bytes:
            continue
        impls[f"SDPA {name}"] = sdpa(name)
    if peers:
        impls[FLEX] = flex()
    calls, skipped = {}, {}
    for name, fn in impls.items():
        def first(fn=fn):
            out = fn(q, k, v, causal)
            torch.autograd.grad(out, (q, k, v), do, retain_graph=True)  # compiles and allocates, untimed
            return out
        out, why = attempt(first)
        if why is None:
            calls[name] = (lambda out=out: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
        else:
            skipped[name] = why
    nflops = 2.5 * flops(b, h, s, d, causal)
    settle(calls[OURS], seconds=0.5)
    res = interleaved(calls, rounds=rounds, flops=nflops, dtype=q.dtype, rep_ms=rep_ms)
    ms = {n: r.median_ms for n, r in res.items()}
    return {"shape": dict(b=b, h=h, s=s, d=d, causal=causal), "method": BACKWARD_METHOD, "bwd_ms": ms,
            "bwd_tflops": {n: _tflops(nflops, m) for n, m in ms.items()},
            "spread": {n: spread(r.medians_ms) for n, r in res.items()}, "rounds": rounds, "skipped": skipped}


def naive_softcap(q, k, v, causal=False):
    """:func:`naive` with the scores soft-capped, ``SOFTCAP * tanh(s / SOFTCAP)`` (as Gemma 2 does): one line more,
    and no longer the pattern torch.compile knows (``causal`` is ignored)."""
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    s = SOFTCAP * torch.tanh(s / SOFTCAP)
    return torch.softmax(s, dim=-1) @ v


def generated_calls(fn, *args) -> list:
    """Compile ``fn`` afresh and return what its generated code calls: Triton kernels Inductor wrote
    (``triton_..._fused_...``), library calls (``extern_kernels.bmm``) and aten ops (an SDPA backend's, say)."""
    from torch._inductor.utils import run_and_get_code

    torch.compiler.reset()
    compiled = torch.compile(fn)
    _, codes = run_and_get_code(compiled, *args)
    return calls_in_code("\n".join(codes))


def calls_in_code(text: str) -> list:
    """The calls :func:`generated_calls` reports, read from Inductor's generated code: the Triton kernels it defines,
    its ``extern_kernels.*`` library calls and the SDPA aten ops it calls."""
    names = set(re.findall(r"\bdef (triton_\w+)\(", text)) | set(re.findall(r"\b(extern_kernels\.\w+)\(", text))
    names |= {m for m in re.findall(r"\baten\.(\w+)\.", text) if "scaled_dot_product" in m}
    return sorted(names)


def compiled_naive(b=1, h=16, s=4096, d=64, rounds=3, rep_ms=30) -> dict:
    """Does torch.compile find FlashAttention's rewrite? Attention written plainly, and with soft-capped scores,
    each compiled: what the generated code calls, time and peak memory beyond the inputs, beside FlexAttention with
    the same soft-cap, SDPA and the lesson's kernel (no soft-cap), in one interleaved run (fp16, not causal)."""
    device.require_gpu("Compiling attention written plainly")
    q, k, v = inputs(b, h, s, d)
    calls = {"naive": generated_calls(naive, q, k, v), "naive + soft-cap": generated_calls(naive_softcap, q, k, v)}
    torch.compiler.reset()
    impls = {"naive, eager": naive, "naive, torch.compile": torch.compile(naive),
             "naive + soft-cap, torch.compile": torch.compile(naive_softcap),
             "FlexAttention + soft-cap (compiled)": flex(score_mod=_softcap), "SDPA (its choice)": sdpa(), OURS: _ours}
    t = _time(impls, (q, k, v, False), flops(b, h, s, d, False), rounds, rep_ms)
    peak = {n: peak_extra_mb(fn, q, k, v, False) for n, fn in impls.items() if n in t["ms"]}
    return dict(t, shape=dict(b=b, h=h, s=s, d=d, causal=False), calls=calls, peak_mb=peak,
                score_mb=score_bytes(b, h, s) / 2**20)


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
