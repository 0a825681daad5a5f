"""Lesson 11's measurement on a GPU: the bandwidth floor, the decode ladder, the split-KV kernel against SDPA's decode
path, and ``transformers``' ``generate()`` on the same weights, in one run.

    python -m gpucourse.lessons.l11_llm_decode.bench --out PATH.json        # on a GPU, about 6 minutes
    python -m gpucourse.lessons.l11_llm_decode.bench --tiny --out PATH.json # anywhere: Config.tiny, small sizes

What it measures (GPU, defaults): ``Config.small()`` in the device's 16-bit type (bf16; fp16 on a T4, through
``dtypes.for_device``), batch 1, a 384-token random prompt and 128 greedy tokens, so decoding runs from context 385
to 512 and the floor is computed at context 512 (the most KV cache any step reads; at 385 it would be 0.2% higher).
The bandwidth is the measured copy rate (a torch copy of a 1 GiB buffer, bytes read + written, as the doctor
measures it). Each ladder step reports tokens/s of the decode loop, the fraction of the floor, and whether its
tokens equal eager_dynamic's (else the first position where they differ: bf16 kernels that round differently can
flip a near-tie in the argmax). The kernel comparison times one attention call, B 1, Hq 32, Hkv 8, D 64, at contexts
512 and 8192, the cache read cold (L2 flushed by a read before each repeat), against every SDPA backend that accepts
a length-1 query. ``generate()`` gets the same weights (``model.hf_state_dict``), its default cache and
``cache_implementation="static"``; its decode rate is (n - 1) / (time of n tokens - time of 1 token), the prefill
taken out as the ladder's timing does.

Every step runs in its own Python process with a time limit (``--step`` runs one; ``--in-process`` runs all in
this one): a step that hangs, fails to compile or breaks the CUDA context is recorded with its message, and the rest
go on. ``--budget`` caps the whole run. This module registers no benchmark: it is a script the lead runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import torch

import gpucourse
from gpucourse import device, dtypes, timing
from gpucourse.quant import int4_unavailable

from . import analysis, decode, floor, fused_layer, hf_peer, model
from .decode_attention import decode_attention, default_split

MODULE = "gpucourse.lessons.l11_llm_decode.bench"
LADDER = ("eager_dynamic", "eager_static", "graphs", "graphs_fused", "graphs_split_kv", "compiled",
          "compiled_reduce_overhead", "triton_layer")
INT4_STEPS = ("int4_graphs", "int4_compiled")  # int4 weights: lesson 07's GEMV in a CUDA graph; tinygemm compiled
# In order of cost: torch.compile's steps last, so a run short of time loses them before it loses the peer.
STEPS = ("bandwidth", "eager_dynamic", "eager_static", "graphs", "graphs_fused", "graphs_split_kv", "triton_layer",
         "kernel", "hf_dynamic", "hf_static", "compiled", "profile", "int4_graphs", "int4_compiled",
         "compiled_reduce_overhead")
GPU_ONLY = ("graphs", "graphs_fused", "graphs_split_kv", "compiled_reduce_overhead", "int4_graphs", "profile")
HF_STEPS = ("hf_dynamic", "hf_static")
# Seconds each step may take, process start included (a fresh process imports torch, makes 2.5 GB of weights; the
# int4 steps also decode once eagerly with the int4 weights: the reference their tokens are compared with).
LIMITS = {"bandwidth": 60, "eager_dynamic": 90, "eager_static": 90, "graphs": 90, "graphs_fused": 90,
          "graphs_split_kv": 120, "triton_layer": 120, "kernel": 120, "hf_dynamic": 120, "compiled": 150,
          "hf_static": 180, "profile": 120,
          "int4_graphs": 150, "int4_compiled": 200, "compiled_reduce_overhead": 150}
KERNEL_SHAPE = dict(b=1, hq=32, hkv=8, d=64)
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def _args(argv=None):
    p = argparse.ArgumentParser(prog="python -m gpucourse.lessons.l11_llm_decode.bench",
                                description="Lesson 11: the bandwidth floor, the decode ladder, the split-KV kernel "
                                            "against SDPA, and transformers' generate(), measured in one run.")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--tiny", action="store_true", help="Config.tiny and small sizes (a CPU run of every step)")
    p.add_argument("--large", action="store_true", help="Config.large (Llama 3 8B's shape, 15 GB in bf16) instead of "
                   "Config.small: how the share of the floor grows with the model")
    p.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    p.add_argument("--prompt", type=int, help="prompt length (default 384; --tiny 8)")
    p.add_argument("--new-tokens", type=int, help="tokens to generate (default 128; --tiny 8)")
    p.add_argument("--runs", type=int, help="timed runs per ladder step, median kept (default 3; --tiny 1)")
    p.add_argument("--contexts", help="kernel comparison contexts (default 512,8192; --tiny 64,200)")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode of the 'compiled' and 'int4_compiled' steps (default 'default', captured "
                        "in a CUDA graph by hand; on an H100 it decoded faster than 'max-autotune-no-cudagraphs', "
                        "whose GEMM choices are for larger M)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    p.add_argument("--budget", type=float, default=600.0, help="seconds for the whole run (default 600; an H100 "
                   "took 376 s for every step)")
    p.add_argument("--in-process", action="store_true", help="run every step in this process (no time limits)")
    p.add_argument("--step", help=argparse.SUPPRESS)  # run one step in this process, write its result to --result
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.steps = [s for s in a.steps.split(",") if s]
    unknown = set(a.steps) - set(STEPS)
    if unknown:
        p.error(f"unknown steps {sorted(unknown)}; known: {', '.join(STEPS)}")
    a.prompt = a.prompt or (8 if a.tiny else 384)
    a.new_tokens = a.new_tokens or (8 if a.tiny else 128)
    a.runs = a.runs or (1 if a.tiny else 3)
    a.contexts = [int(c) for c in (a.contexts or ("64,200" if a.tiny else "512,8192")).split(",")]
    return a


def _config(a) -> model.Config:
    ctx = a.prompt + a.new_tokens
    if a.tiny:
        return model.Config.tiny(max_seq=ctx)
    return model.Config.large(max_seq=ctx) if a.large else model.Config.small(max_seq=ctx)


def _dtype(a):
    """float32 on the CPU (the tiny run checks tokens exactly); the device's 16-bit type on a GPU."""
    if not device.on_gpu():
        return torch.float32
    return dtypes.for_device("bfloat16").torch


def _setup(a):
    dev = device.torch_device()
    cfg = _config(a)
    w = model.make_weights(cfg, dev, _dtype(a), seed=0)
    prompt = decode.make_prompt(cfg, a.prompt, 1, dev, seed=1)
    return cfg, w, prompt


# ---------------------------------------------------------------------------------------------------------------------
# The steps. Each returns a JSON-able dict.


def step_bandwidth(a) -> dict:
    nbytes = (64 << 20) if (a.tiny or not device.on_gpu()) else (1 << 30)
    gbs = timing.copy_gbps(nbytes)
    spec = gpucourse.specs.current()
    return {"copy_gbps": gbs, "buffer_bytes": nbytes, "datasheet_gbps": spec.bandwidth_gbs if spec else None}


def _int4_step(a, name: str, cfg, w, prompt) -> dict:
    """An int4 step: the fused weights quantized (``model.quantize_weights``; in CPU mode the tiny model in bf16 first,
    as the kernels take 16-bit activations), an untimed eager run of them with margins (the reference), and the timed
    step: lesson 07's GEMV in a CUDA graph (``int4_graphs``) or tinygemm compiled (``int4_compiled``)."""
    n, runs = a.new_tokens, a.runs
    if w["embed"].dtype == torch.float32:
        w = model.cast_weights(w, torch.bfloat16)
    backend = "lesson" if name == "int4_graphs" else "tinygemm"
    why = int4_unavailable(backend, w["embed"].dtype, prompt.device)
    if why:  # e.g. a T4: fp16 activations, which tinygemm does not take
        return {"skipped": f"int4 ({backend}) cannot run here: {why}"}
    qw = model.quantize_weights(model.fuse_weights(w), backend=backend)
    ref = decode.eager_dynamic(qw, cfg, prompt, n, runs=1, warmup=0, margins=True)
    t0 = time.perf_counter()
    if name == "int4_graphs":
        r = decode.graphs(qw, cfg, prompt, n, runs=runs, warmup=1)
    else:
        r = decode.compiled(qw, cfg, prompt, n, runs=runs, warmup=1, mode=a.compile_mode, backend=a.compile_backend)
    out = dict(r.to_dict(), weight_bytes=model.weight_bytes_read(qw), backend=backend,
               reference={"tokens": ref.tokens.tolist(), "margins": ref.margins.tolist()})
    if name == "int4_compiled":
        out["setup_and_compile_s"] = time.perf_counter() - t0 - sum(r.all_seconds)
    return out


def _ladder_step(a, name: str) -> dict:
    cfg, w, prompt = _setup(a)
    n, runs = a.new_tokens, a.runs
    if name in INT4_STEPS:
        return _int4_step(a, name, cfg, w, prompt)
    if name == "eager_dynamic":  # the reference: its margins, and how far two correct paths' logits lie apart
        r = decode.eager_dynamic(w, cfg, prompt, n, runs=runs, warmup=1, margins=True)
        noise = decode.path_noise(w, cfg, prompt, n)
        return dict(r.to_dict(), path_noise={k: noise[k] for k in ("max_abs", "flips")})
    elif name == "eager_static":
        r = decode.eager_static(w, cfg, prompt, n, runs=runs, warmup=1)
    elif name == "graphs":
        r = decode.graphs(w, cfg, prompt, n, runs=runs, warmup=1)
    elif name == "graphs_fused":
        r = decode.graphs(model.fuse_weights(w), cfg, prompt, n, runs=runs, warmup=1)
    elif name == "graphs_split_kv":
        r = decode.graphs(model.fuse_weights(w), cfg, prompt, n, runs=runs, warmup=1, attention="split_kv")
    elif name == "triton_layer":
        r = fused_layer.triton_layer(model.fuse_weights(w), cfg, prompt, n, runs=runs, warmup=1)
    elif name in ("compiled", "compiled_reduce_overhead"):
        mode = a.compile_mode if name == "compiled" else "reduce-overhead"
        t0 = time.perf_counter()
        r = decode.compiled(model.fuse_weights(w), cfg, prompt, n, runs=runs, warmup=1, mode=mode,
                            backend=a.compile_backend)
        return dict(r.to_dict(), setup_and_compile_s=time.perf_counter() - t0 - sum(r.all_seconds))
    else:
        raise KeyError(name)
    return r.to_dict()


def _sdpa_call(backend: str, q4, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = k.shape[1] != q4.shape[1]

    def call():
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(q4, k, v, enable_gqa=gqa)
    return call


def step_kernel(a) -> dict:
    """The split-KV kernel against SDPA with a length-1 query, at each context: ms, GB/s of K and V read, and the
    largest difference from SDPA's MATH output."""
    dev = device.torch_device()
    dt = _dtype(a)
    s = KERNEL_SHAPE
    hq, hkv = (s["hq"], s["hkv"]) if not a.tiny else (8, 2)
    quick = {} if device.on_gpu() else {"warmup_ms": 0, "rep_ms": 1, "min_reps": 1}
    out = {"shape": dict(s, hq=hq, hkv=hkv), "dtype": dtypes.torch_name(dt), "contexts": {}}
    for ctx in a.contexts:
        g = torch.Generator(device=dev)
        g.manual_seed(ctx)
        q = torch.randn(s["b"], hq, s["d"], device=dev, dtype=dt, generator=g)
        k = torch.randn(s["b"], hkv, ctx, s["d"], device=dev, dtype=dt, generator=g)
        v = torch.randn(s["b"], hkv, ctx, s["d"], device=dev, dtype=dt, generator=g)
        seq = torch.full((s["b"],), ctx, device=dev, dtype=torch.int32)
        nbytes = 2 * k.numel() * k.element_size() + 2 * q.numel() * q.element_size()
        q4 = q.unsqueeze(2)
        ref = _sdpa_call("MATH", q4, k, v)().squeeze(2).float()
        row = {"bytes": nbytes, "impls": {}}
        impls = {"split-KV (Triton)": lambda: decode_attention(q, k, v, seq)}
        if device.on_gpu():  # other split sizes than the default, for tuning
            impls.update({f"split-KV (Triton), split {n}": (lambda n=n: decode_attention(q, k, v, seq, split_size=n))
                          for n in (64, 128, 512, 1024) if n < ctx})
        impls.update({f"SDPA {b}": _sdpa_call(b, q4, k, v) for b in SDPA_BACKENDS})
        for name, fn in list(impls.items()):
            try:
                try:
                    got = fn()
                except RuntimeError:
                    if not name.startswith("SDPA"):
                        raise
                    # A backend without grouped-query support: K and V expanded to Hq heads beforehand (untimed),
                    # as code written before enable_gqa does; it then reads Hq / Hkv times the bytes.
                    name = f"{name} (KV expanded to Hq heads)"
                    g_ = hq // hkv
                    fn = _sdpa_call(name.split()[1], q4, k.repeat_interleave(g_, 1), v.repeat_interleave(g_, 1))
                    got = fn()
                got = got.squeeze(2) if got.dim() == 4 else got
                err = float((got.float() - ref).abs().max())
                r = timing.bench(fn, bytes=nbytes, name=name, flush_l2="read", **quick)
                row["impls"][name] = {"ms": r.median_ms, "gbps": r.gbps, "max_abs_diff_vs_math": err,
                                      "warnings": r.warnings}
            except Exception as exc:  # a backend that refuses this shape, dtype or GPU
                row["impls"][name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
        row["default_split"] = default_split(s["b"], hkv, ctx, dev)
        timed = {n: r["ms"] for n, r in row["impls"].items() if "ms" in r and n.startswith("SDPA")}
        if timed and "ms" in row["impls"]["split-KV (Triton)"]:
            best = min(timed, key=timed.get)
            row["best_sdpa"] = best
            row["speedup_vs_best_sdpa"] = timed[best] / row["impls"]["split-KV (Triton)"]["ms"]
        out["contexts"][str(ctx)] = row
    return out


def run_step(name: str, a) -> dict:
    """One step in this process; an exception becomes ``{"error": message, "traceback": ...}``."""
    t0 = time.perf_counter()
    try:
        if name == "bandwidth":
            res = step_bandwidth(a)
        elif name == "kernel":
            res = step_kernel(a)
        elif name == "profile":
            cfg, w, prompt = _setup(a)
            res = analysis.before_after(model.fuse_weights(w), cfg, prompt, mode=a.compile_mode)
            res.pop("timelines")
        elif name in HF_STEPS:
            res = hf_peer.step(a, _setup(a), static=name == "hf_static")
        else:
            res = _ladder_step(a, name)
    except Exception as exc:
        res = {"error": f"{type(exc).__name__}: {str(exc).strip()[:2000]}", "traceback": traceback.format_exc()[-4000:]}
    res["wall_s"] = time.perf_counter() - t0
    return res


def _child(name: str, a, argv: list, limit: float) -> dict:
    """``name`` in a fresh process (same arguments), killed after ``limit`` seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", MODULE, *argv, "--step", name, "--result", path]
        t0 = time.perf_counter()
        # Its own process group, so that a timeout also ends what it started (torch.compile's compile workers).
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            _, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, err = proc.communicate()
            return {"error": f"timed out after {limit:.0f} s", "stderr_tail": (err or "")[-2000:],
                    "wall_s": time.perf_counter() - t0}
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        return {"error": f"the step's process exited with code {proc.returncode} and no result",
                "stderr_tail": (err or "")[-3000:], "wall_s": time.perf_counter() - t0}


def _skip_reason(name: str, a):
    if name in GPU_ONLY and not device.on_gpu():
        return "needs a GPU: skipped in CPU mode"
    if name not in ("bandwidth", "kernel") and device.on_gpu():
        cfg = _config(a)
        need, have = cfg.weight_bytes(_dtype(a)), torch.cuda.get_device_properties(0).total_memory
        if need > 0.9 * have:  # the weights alone, before the cache and the step's own copies
            return (f"the model's weights take {need / 1e9:.1f} GB in {str(_dtype(a)).replace('torch.', '')}, more "
                    f"than this GPU's {have / 1e9:.1f} GB can hold with room to run"
                    + (" (Config.large is Llama 3 8B's shape; run without --large)" if a.large else ""))
    if name in HF_STEPS and importlib.util.find_spec("transformers") is None:
        return "transformers is not installed here: generate() not measured"
    return None


def _forwarded_argv(argv: list) -> list:
    """The command line minus what only the parent uses (--out, --budget, --in-process)."""
    out, skip = [], False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok in ("--out", "--budget"):
            skip = True
            continue
        if tok.startswith(("--out=", "--budget=")) or tok == "--in-process":
            continue
        out.append(tok)
    return out


def _tolerance(results: dict, dtype) -> float | None:
    """The near-tie tolerance of the run: 0 in float32 (tokens must be equal), else ``decode.tie_tolerance`` of the
    eager step's measured path noise (None if the eager step has none)."""
    if dtype == torch.float32:
        return 0.0
    noise = results.get("eager_dynamic", {}).get("path_noise")
    return decode.tie_tolerance(noise) if noise else None


def _agreement(ref: dict, tokens, tolerance: float | None) -> dict:
    """A step's tokens against its reference's (a JSON eager run with margins): equal, or the first step where they
    differ and whether the reference's top two logits were within ``tolerance`` there (None: not judged)."""
    run = decode.Run("reference", torch.tensor(ref["tokens"]), 0.0, 0,
                     margins=None if ref.get("margins") is None else torch.tensor(ref["margins"]))
    tie = decode.near_tie(run, torch.tensor(tokens), 0.0 if tolerance is None else tolerance)
    return {"tokens_equal_eager": tie["equal"], "first_divergence": tie["first_divergence"],
            "margin_at_divergence": tie["margin"],
            "near_tie": tie["within"] if tie["equal"] or tolerance is not None else None}


def summarize(a, results: dict) -> dict:
    """The ladder table: each step's tokens/s, its fraction of the floor, and its tokens against eager_dynamic's."""
    cfg = _config(a)
    dt = _dtype(a)
    context = a.prompt + a.new_tokens
    doc = {"config": dataclasses.asdict(cfg), "n_params": cfg.n_params, "dtype": dtypes.torch_name(dt),
           "prompt": a.prompt, "new_tokens": a.new_tokens, "context": context}
    bw = results.get("bandwidth", {})
    gbs = bw.get("copy_gbps")
    if gbs:
        doc["floor"] = {"bytes_per_token": floor.bytes_per_token(cfg, context, dt), "bandwidth_gbps": gbs,
                        "tokens_per_s": floor.tokens_per_second_floor(cfg, gbs * 1e9, context, dt)}
    eager = results.get("eager_dynamic", {})
    tol = _tolerance(results, dt)
    if eager.get("path_noise"):
        doc["near_tie"] = {"path_noise": eager["path_noise"]["max_abs"], "tolerance": tol}
    rows = []
    for name in (*LADDER, *INT4_STEPS, *HF_STEPS):
        if name not in results:
            continue
        r = results[name]
        row = {"step": name}
        if r.get("error") or r.get("skipped"):
            row["note"] = r.get("error") or r.get("skipped")
        else:
            tps = r.get("tokens_per_s")
            row["tokens_per_s"] = tps
            if "floor" in doc and tps:
                row["fraction_of_floor"] = tps / doc["floor"]["tokens_per_s"]
            ref = r.get("reference") or eager  # an int4 step's own eager run, else the bf16 eager loop
            if ref.get("tokens") is not None and r.get("tokens") is not None:
                row.update(_agreement(ref, r["tokens"], tol))
        rows.append(row)
    doc["ladder"] = rows
    speed = {r["step"]: r["tokens_per_s"] for r in rows if r.get("tokens_per_s")}
    best = max((v for k, v in speed.items() if k in LADDER), default=None)
    if best:
        doc["ratios"] = {f"best ladder / {k}": best / v for k, v in speed.items() if k in HF_STEPS}
        if "int4_compiled" in speed and "compiled" in speed:
            doc["ratios"]["int4_compiled / compiled"] = speed["int4_compiled"] / speed["compiled"]
    return doc


def _table(doc: dict, results: dict) -> str:
    lines = [f"{doc['n_params'] / 1e9:.3f} B parameters, {doc['dtype']}, prompt {doc['prompt']} + {doc['new_tokens']} "
             f"tokens (context {doc['context']})"]
    if "floor" in doc:
        f = doc["floor"]
        lines.append(f"floor: {f['bytes_per_token'] / 1e9:.3f} GB per token at {f['bandwidth_gbps']:,.0f} GB/s copy "
                     f"rate = {f['tokens_per_s']:,.0f} tokens/s")
    else:
        lines.append(f"floor: not computed ({results.get('bandwidth', {}).get('error', 'no bandwidth step')})")
    if "near_tie" in doc:
        nt = doc["near_tie"]
        lines.append(f"two correct paths' logits differ by up to {nt['path_noise']:.3f} (teacher-forced): a divergence "
                     f"is a near-tie where eager's top two were within {nt['tolerance']:.3f}")
    lines.append(f"{'step':<26}{'tokens/s':>10}{'of floor':>10}  tokens vs the eager loop (int4: its own)")
    for r in doc["ladder"]:
        if "note" in r:
            lines.append(f"{r['step']:<26}{'-':>10}{'-':>10}  {r['note'].splitlines()[0][:70]}")
            continue
        frac = f"{100 * r['fraction_of_floor']:.1f}%" if "fraction_of_floor" in r else "-"
        eq = "-"
        if r.get("tokens_equal_eager"):
            eq = "equal"
        elif "tokens_equal_eager" in r:
            eq = (f"differ from step {r['first_divergence']} (reference margin {r['margin_at_divergence']:.4f}: "
                  f"{ {True: 'a near-tie', False: 'NOT a near-tie', None: 'not judged'}[r['near_tie']]})")
        lines.append(f"{r['step']:<26}{r['tokens_per_s']:>10,.1f}{frac:>10}  {eq}")
    for k, v in doc.get("ratios", {}).items():
        lines.append(f"{k}: {v:.2f}x")
    prof = results.get("profile") or {}
    for when in ("before", "after"):
        if when in prof:
            p = prof[when]
            lines.append(f"one token {when} ({'eager' if when == 'before' else 'compiled, in a CUDA graph'}): "
                         f"{p['window_us']:,.0f} us, GPU busy {p['gpu_busy_us']:,.0f} us "
                         f"({100 * (1 - p['gpu_idle_fraction']):.0f}%), {p['gpu_events']:.0f} kernels")
    for cat, c in ((prof.get("kernels_after") or {}).get("categories") or {}).items():
        lines.append(f"  {cat}: {c['kernels']:.0f} kernels, {c['us']:,.1f} us")
    for k in ((prof.get("kernels_after") or {}).get("by_name") or [])[:8]:
        lines.append(f"    {k['us']:7,.1f} us {k['kernels']:4.0f} x {k['name'][:90]}")
    kern = results.get("kernel", {})
    if "contexts" in kern:
        for ctx, row in kern["contexts"].items():
            parts = []
            for name, r in row["impls"].items():
                parts.append(f"{name} {r['ms'] * 1e3:.1f} us" if "ms" in r else f"{name} refused")
            lines.append(f"decode attention, context {ctx}: " + "; ".join(parts))
            if "speedup_vs_best_sdpa" in row:
                lines.append(f"  split-KV / best SDPA ({row['best_sdpa']}): {row['speedup_vs_best_sdpa']:.2f}x")
    elif "error" in kern:
        lines.append(f"decode attention: {kern['error'].splitlines()[0]}")
    for name in HF_STEPS:
        if "skipped" in results.get(name, {}):
            lines.append(f"{name}: {results[name]['skipped']}")
    return "\n".join(lines)


def _environment() -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "python": platform.python_version(), "mode": device.mode()}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    p = device.props()
    env["device"] = p.name if p else "cpu"
    return env


def main(argv=None) -> dict | None:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = _args(argv)
    if a.step:
        res = run_step(a.step, a)
        with open(a.result, "w") as f:
            json.dump(_clean(res), f, default=str)
        return None
    start = time.perf_counter()
    forwarded = _forwarded_argv(argv)
    results = {}
    for name in a.steps:
        reason = _skip_reason(name, a)
        left = a.budget - (time.perf_counter() - start)
        if reason:
            results[name] = {"skipped": reason}
        elif left < 10:
            results[name] = {"skipped": f"out of time: the run's budget of {a.budget:.0f} s was spent"}
        elif a.in_process:
            results[name] = run_step(name, a)
        else:
            results[name] = _child(name, a, forwarded, min(LIMITS[name], left))
        r = results[name]
        status = r.get("error") or r.get("skipped") or "ok"
        print(f"[{time.perf_counter() - start:6.1f} s] {name}: {status.splitlines()[0][:100]}", flush=True)
    doc = dict(_environment(), **summarize(a, results), steps=results)
    print(_table(doc, results))
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(_clean(doc), f, indent=1, default=str)
            f.write("\n")
        print(f"wrote {a.out}")
    return doc



# ---------------------------------------------------------------------------------------------------------------------
# What the lesson's notebook calls: the run's settings, the targets, and where one token's time goes.


def settings(argv=None) -> argparse.Namespace:
    """The settings a step reads (:func:`run_step`), from a command line as this script takes it (``None``: the
    defaults), so a notebook can run one step in its own process: ``run_step("hf_static", settings([...]))``."""
    return _args(list(argv or []))


def _clean(x):
    """``x`` with NaN and infinities as None (strict JSON has neither)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


if __name__ == "__main__":
    main()
