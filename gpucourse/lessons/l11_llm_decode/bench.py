"""Lesson 11's measurement on a GPU: the bandwidth floor, the decode ladder, the split-KV kernel against SDPA's decode
path, and ``transformers``' ``generate()`` on the same weights, in one run.

    python -m gpucourse.lessons.l11_llm_decode.bench --out PATH.json        # on a GPU, about 5 minutes
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

from . import decode, floor, model
from .decode_attention import decode_attention, default_split

MODULE = "gpucourse.lessons.l11_llm_decode.bench"
LADDER = ("eager_dynamic", "eager_static", "graphs", "graphs_split_kv", "compiled", "compiled_reduce_overhead")
# In order of cost: torch.compile's steps last (max-autotune searches GEMM configs), so a run short of time loses
# them before it loses the peer.
STEPS = ("bandwidth", "eager_dynamic", "eager_static", "graphs", "graphs_split_kv", "kernel", "hf_dynamic",
         "hf_static", "compiled", "compiled_reduce_overhead")
GPU_ONLY = ("graphs", "graphs_split_kv", "compiled_reduce_overhead")
HF_STEPS = ("hf_dynamic", "hf_static")
# Seconds each step may take, process start included (a fresh process imports torch, makes 2.5 GB of weights).
LIMITS = {"bandwidth": 60, "eager_dynamic": 90, "eager_static": 90, "graphs": 90, "graphs_split_kv": 120,
          "kernel": 120, "hf_dynamic": 120, "compiled": 200, "hf_static": 180, "compiled_reduce_overhead": 200}
KERNEL_SHAPE = dict(b=1, hq=32, hkv=8, d=64)
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def _args(argv=None):
    p = argparse.ArgumentParser(prog="python -m gpucourse.lessons.l11_llm_decode.bench",
                                description="Lesson 11: the bandwidth floor, the decode ladder, the split-KV kernel "
                                            "against SDPA, and transformers' generate(), measured in one run.")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--tiny", action="store_true", help="Config.tiny and small sizes (a CPU run of every step)")
    p.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    p.add_argument("--prompt", type=int, help="prompt length (default 384; --tiny 8)")
    p.add_argument("--new-tokens", type=int, help="tokens to generate (default 128; --tiny 8)")
    p.add_argument("--runs", type=int, help="timed runs per ladder step, median kept (default 3; --tiny 1)")
    p.add_argument("--contexts", help="kernel comparison contexts (default 512,8192; --tiny 64,200)")
    p.add_argument("--compile-mode", default="max-autotune-no-cudagraphs",
                   help="torch.compile mode of the 'compiled' step (default max-autotune-no-cudagraphs, captured in a "
                        "CUDA graph by hand; 'default' compiles faster)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    p.add_argument("--budget", type=float, default=330.0, help="seconds for the whole run (default 330)")
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
    return model.Config.tiny(max_seq=ctx) if a.tiny else model.Config.small(max_seq=ctx)


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


def _ladder_step(a, name: str) -> dict:
    cfg, w, prompt = _setup(a)
    n, runs = a.new_tokens, a.runs
    if name == "eager_dynamic":
        r = decode.eager_dynamic(w, cfg, prompt, n, runs=runs, warmup=1)
    elif name == "eager_static":
        r = decode.eager_static(w, cfg, prompt, n, runs=runs, warmup=1)
    elif name == "graphs":
        r = decode.graphs(w, cfg, prompt, n, runs=runs, warmup=1)
    elif name == "graphs_split_kv":
        r = decode.graphs(w, cfg, prompt, n, runs=runs, warmup=1, attention="split_kv")
    elif name == "compiled":
        t0 = time.perf_counter()
        r = decode.compiled(w, cfg, prompt, n, runs=runs, warmup=1, mode=a.compile_mode, backend=a.compile_backend)
        return dict(r.to_dict(), setup_and_compile_s=time.perf_counter() - t0 - sum(r.all_seconds))
    elif name == "compiled_reduce_overhead":
        t0 = time.perf_counter()
        r = decode.compiled(w, cfg, prompt, n, runs=runs, warmup=1, mode="reduce-overhead",
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


def _hf_model(cfg: model.Config, weights: dict, dt, dev):
    from transformers import LlamaConfig, LlamaForCausalLM

    hc = LlamaConfig(vocab_size=cfg.vocab, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                     num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                     num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, max_position_embeddings=cfg.max_seq,
                     rms_norm_eps=cfg.norm_eps, tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
                     mlp_bias=False, rope_theta=cfg.rope_theta)
    if hasattr(hc, "rope_parameters"):  # transformers 5 reads RoPE's base from here
        hc.rope_parameters = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    before = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        with torch.device(dev):
            hf = LlamaForCausalLM(hc)
    finally:
        torch.set_default_dtype(before)
    for prm in hf.parameters():  # where construction ignored the default dtype: parameters only (hf.to(dt) would
        prm.data = prm.data.to(dt)  # also round RoPE's float32 inv_freq buffer)
    res = hf.load_state_dict(model.hf_state_dict(weights), strict=False)
    if res.unexpected_keys or set(res.missing_keys) - {"lm_head.weight"}:
        raise RuntimeError(f"weights did not map onto LlamaForCausalLM: missing {res.missing_keys}, unexpected "
                           f"{res.unexpected_keys}")
    hf.eval()
    hf.generation_config.eos_token_id = None  # a fixed number of tokens: no stop token
    hf.generation_config.pad_token_id = 0
    return hf


def _step_hf(a, static: bool) -> dict:
    import transformers

    cfg, w, prompt = _setup(a)
    dev = prompt.device
    hf = _hf_model(cfg, w, _dtype(a), dev)
    del w  # generate() reads its own copy
    mask = torch.ones_like(prompt)  # explicit: token 0 (the pad id) may occur in a random prompt
    extra = {"cache_implementation": "static"} if static else {}

    def gen(n):
        torch.cuda.synchronize() if dev.type == "cuda" else None
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = hf.generate(prompt, attention_mask=mask, max_new_tokens=n, do_sample=False, **extra)
        torch.cuda.synchronize() if dev.type == "cuda" else None
        return out[:, prompt.shape[1]:], time.perf_counter() - t0

    n = a.new_tokens
    t0 = time.perf_counter()
    gen(n), gen(1)  # warm-up: allocations, and the compilation a static cache may trigger
    warm_s = time.perf_counter() - t0
    full, one = [], []
    for _ in range(a.runs):
        tokens, s = gen(n)
        full.append(s)
        one.append(gen(1)[1])
    t_n, t_1 = sorted(full)[len(full) // 2], sorted(one)[len(one) // 2]
    return {"name": "hf_static" if static else "hf_dynamic", "transformers": transformers.__version__,
            "tokens": tokens.cpu().tolist(), "seconds": t_n - t_1, "steps": n - 1, "batch": 1,
            "tokens_per_s": (n - 1) / (t_n - t_1) if t_n > t_1 else float("nan"),
            "generate_s": t_n, "generate_1_token_s": t_1, "warmup_s": warm_s, "all_seconds": full,
            "cache_implementation": "static" if static else "default"}


def run_step(name: str, a) -> dict:
    """One step in this process; an exception becomes ``{"error": message, "traceback": ...}``."""
    t0 = time.perf_counter()
    try:
        if name == "bandwidth":
            res = step_bandwidth(a)
        elif name == "kernel":
            res = step_kernel(a)
        elif name in HF_STEPS:
            res = _step_hf(a, static=name == "hf_static")
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
    base = results.get("eager_dynamic", {}).get("tokens")
    rows = []
    for name in (*LADDER, *HF_STEPS):
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
            if base is not None and r.get("tokens") is not None:
                div = decode.first_divergence(torch.tensor(base), torch.tensor(r["tokens"]))
                row["tokens_equal_eager"] = div is None
                row["first_divergence"] = None if div is None else div[1]
        rows.append(row)
    doc["ladder"] = rows
    speed = {r["step"]: r["tokens_per_s"] for r in rows if r.get("tokens_per_s")}
    best = max((v for k, v in speed.items() if k in LADDER), default=None)
    if best:
        doc["ratios"] = {f"best ladder / {k}": best / v for k, v in speed.items() if k in HF_STEPS}
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
    lines.append(f"{'step':<26}{'tokens/s':>10}{'of floor':>10}  tokens vs eager_dynamic")
    for r in doc["ladder"]:
        if "note" in r:
            lines.append(f"{r['step']:<26}{'-':>10}{'-':>10}  {r['note'].splitlines()[0][:70]}")
            continue
        frac = f"{100 * r['fraction_of_floor']:.1f}%" if "fraction_of_floor" in r else "-"
        eq = ("equal" if r.get("tokens_equal_eager") else f"differ from position {r.get('first_divergence')}") \
            if "tokens_equal_eager" in r else "-"
        lines.append(f"{r['step']:<26}{r['tokens_per_s']:>10,.1f}{frac:>10}  {eq}")
    for k, v in doc.get("ratios", {}).items():
        lines.append(f"{k}: {v:.2f}x")
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


TARGETS = (("fraction_of_floor", "bf16 decode at context 512: share of the bandwidth floor", 0.70),
           ("over_hf_static", "best ladder step / generate() with a static cache", 2.5),
           ("over_hf_default", "best ladder step / generate() with its default cache", 10.0),
           ("split_kv_over_best_sdpa", "split-KV kernel / the fastest SDPA backend at context 8192", 1.5))


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


def breakdown(kernels: list, tokens: int = 1) -> dict:
    """Per category, kernels and GPU microseconds per token, from ``kernels`` = [(name, microseconds)] recorded
    over ``tokens`` decode steps; also the longest matmul kernel as ``head`` (for Config.small the output head: it
    reads vocab x d, about 16 times the largest layer matrix)."""
    out = {}
    for name, us in kernels:
        c = out.setdefault(kernel_category(name), {"kernels": 0, "us": 0.0})
        c["kernels"] += 1
        c["us"] += us
    for c in out.values():
        c["kernels"] /= tokens
        c["us"] /= tokens
    mms = [(us, name) for name, us in kernels if kernel_category(name) == "matmul (GEMV)"]
    return {"categories": dict(sorted(out.items(), key=lambda kv: -kv[1]["us"])),
            "kernels_per_token": len(kernels) / tokens, "gpu_us_per_token": sum(us for _, us in kernels) / tokens,
            "head": None if not mms else {"name": max(mms)[1], "us": max(mms)[0]}}


def token_profile(weights: dict, config: model.Config, prompt, mode: str = "max-autotune-no-cudagraphs",
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
