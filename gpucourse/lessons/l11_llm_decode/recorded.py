"""What lesson 11 measured on the course's H100: the lesson shows it, labelled, where it cannot measure (CPU mode, no
``transformers``). The figures come from the lesson's curated file
``benchmarks/results/recorded/h100-l11_llm_decode.json`` (:mod:`gpucourse.recorded`), read by its stable keys.

``python -m gpucourse.lessons.l11_llm_decode.recorded promote`` writes that file from the lesson's benchmark run
(``python -m gpucourse.lessons.l11_llm_decode.bench --out ...``, committed as
``benchmarks/results/h100-l11-bench.json``): the section at the end of this module is the only place that knows that
file's layout.
"""
from __future__ import annotations

import os
import sys

from gpucourse import recorded as curated

LESSON = "l11_llm_decode"

KEYS = {
    "run": "what the run decoded: n_params, dtype, prompt, new_tokens, context (the floor's), compile_mode",
    "floor": "the bandwidth floor at the run's context: bytes_per_token, bandwidth_gbps (measured copy rate), "
             "tokens_per_s",
    "ladder": "the decode ladder, in order: rows of {step, tokens_per_s, fraction_of_floor, first_divergence, "
              "margin_at_divergence, near_tie} (first_divergence: the first generated step whose token differs from "
              "eager_dynamic's, None if none; margin_at_divergence: eager_dynamic's top-1 minus top-2 logit there; "
              "near_tie: that margin within the run's near_tie tolerance)",
    "near_tie": "how the run judged a divergence: {path_noise (the largest |logit difference| between the eager loop "
                "and the static cache with split-KV attention, both fed eager's tokens), tolerance (twice that: "
                "decode.tie_tolerance)}",
    "int4": "the int4 steps (fused weights quantized in groups of 128): rows of {step, backend, tokens_per_s, "
            "fraction_of_floor (of the bf16 floor), weight_bytes (read per token), first_divergence, "
            "margin_at_divergence, near_tie} (tokens against the int4 model's own eager loop)",
    "peers": "transformers' generate() on the same weights: rows of {step, cache, tokens_per_s, fraction_of_floor, "
             "first_divergence}",
    "repeat": "the same benchmark on a second H100 machine: {step: tokens_per_s} (eager steps measure the host)",
    "repeat_peers": "generate() in that second run: rows of {step, first_divergence, margin_at_divergence} (its tokens "
                    "against that run's eager loop)",
    "profile": "one decode step under torch.profiler, before (eager) and after (compiled, replayed from a CUDA graph), "
               "per token: {before, after: {window_us, gpu_busy_us, gpu_idle_fraction, gpu_events}, kernels_after: "
               "{category: {kernels, us}}}",
    "decode_attention": "one decode attention call (B 1, Hq 32, Hkv 8, D 64, bf16, L2 flushed) per context: {context: "
                        "{us: {implementation: microseconds}, best_sdpa, split_kv_over_best_sdpa}}",
}
LADDER_STEPS = ("eager_dynamic", "eager_static", "graphs", "graphs_fused", "graphs_split_kv", "compiled",
                "compiled_reduce_overhead", "triton_layer")
INT4_STEPS = ("int4_graphs", "int4_compiled")
PEER_STEPS = ("hf_dynamic", "hf_static")
SPLIT_KV = "split-KV (Triton)"  # the kernel with its default split, as the benchmark names it


def load() -> curated.Recorded:
    """The lesson's recorded H100 values, indexed by the keys of :data:`KEYS`."""
    return curated.load(LESSON)


def file_name() -> str:
    return os.path.basename(curated.path_for(LESSON))


def label(doc: curated.Recorded | None = None) -> str:
    """"recorded on an NVIDIA H100 80GB HBM3 (torch ..., triton ..., transformers ...), not measured here (file)"."""
    doc = doc or load()
    env = doc.environment
    return (f"recorded on an {env.get('gpu', 'H100')} (torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, "
            f"transformers {env.get('transformers', '?')}), not measured here ({file_name()})")


def best_ladder(doc: curated.Recorded | None = None) -> dict:
    """The fastest ladder row."""
    doc = doc or load()
    return max(doc["ladder"], key=lambda r: r["tokens_per_s"])


def speed(doc: curated.Recorded | None = None) -> dict:
    """tokens/s of every step, ladder, int4 and peers, by step name."""
    doc = doc or load()
    return {r["step"]: r["tokens_per_s"] for r in [*doc["ladder"], *doc["peers"], *doc.get("int4", [])]}


def split_kv_ratios(doc: curated.Recorded | None = None) -> dict:
    """Per context, every SDPA backend's time over the split-KV kernel's (above 1: the kernel is faster)."""
    doc = doc or load()
    out = {}
    for ctx, row in doc["decode_attention"].items():
        mine = row["us"][SPLIT_KV]
        out[ctx] = {name: us / mine for name, us in row["us"].items() if name.startswith("SDPA")}
    return out


# ---------------------------------------------------------------------------------------------------------------------
# The promote step: the benchmark's run -> the curated file. The run's layout appears here only.

SOURCE = "benchmarks/results/h100-l11-bench.json"
REPEAT = "benchmarks/results/h100-l11-bench-run2.json"  # the same command on another H100 machine


def promote_values(run: dict, repeat: dict | None = None) -> dict:
    """The curated values from the benchmark run's document (``bench.main``'s JSON)."""
    rows = {r["step"]: r for r in run["ladder"]}
    missing = [s for s in (*LADDER_STEPS, *INT4_STEPS, *PEER_STEPS) if s not in rows or "tokens_per_s" not in rows[s]]
    if missing:
        raise ValueError(f"{SOURCE}: steps without a result: {missing}")

    def row(step):
        r = rows[step]
        return {"step": step, "tokens_per_s": r["tokens_per_s"], "fraction_of_floor": r["fraction_of_floor"],
                "first_divergence": r.get("first_divergence"), "margin_at_divergence": r.get("margin_at_divergence"),
                "near_tie": r.get("near_tie")}

    steps = run["steps"]
    peers = [dict(row(s), cache=steps[s]["cache_implementation"]) for s in PEER_STEPS]
    kernel = {}
    for ctx, k in steps["kernel"]["contexts"].items():
        us = {name: r["ms"] * 1e3 for name, r in k["impls"].items() if "ms" in r and ", split " not in name}
        kernel[ctx] = {"us": us, "best_sdpa": k["best_sdpa"], "split_kv_over_best_sdpa": k["speedup_vs_best_sdpa"]}
    return {"run": {"n_params": run["n_params"], "dtype": run["dtype"], "prompt": run["prompt"],
                    "new_tokens": run["new_tokens"], "context": run["context"],
                    "compile_mode": steps["compiled"]["name"].split("[")[1].rstrip("]")},
            "floor": dict(run["floor"]), "near_tie": dict(run["near_tie"]), "ladder": [row(s) for s in LADDER_STEPS], "peers": peers,
            "int4": [dict(row(s), backend=steps[s]["backend"], weight_bytes=steps[s]["weight_bytes"])
                     for s in INT4_STEPS],
            "decode_attention": kernel,
            "repeat": {r["step"]: r["tokens_per_s"] for r in (repeat or {}).get("ladder", []) if "tokens_per_s" in r},
            "repeat_peers": [{k: r.get(k) for k in ("step", "first_divergence", "margin_at_divergence")}
                             for r in (repeat or {}).get("ladder", []) if r["step"] in PEER_STEPS],
            "profile": {"before": steps["profile"]["before"], "after": steps["profile"]["after"],
                        "kernels_after": steps["profile"]["kernels_after"]["categories"]}}


def promote_environment(run: dict) -> dict:
    """The run's versions and GPU, as the curated file records them."""
    return {"torch": run["torch"], "triton": run["triton"], "gpu": run["device"], "date": run["date"],
            "transformers": run["steps"]["hf_static"].get("transformers")}


def promote() -> str:
    """Write the curated file from the benchmark's run; returns its path."""
    import json

    from gpucourse.workbooks import ROOT

    with open(os.path.join(ROOT, SOURCE)) as f:
        run = json.load(f)
    with open(os.path.join(ROOT, REPEAT)) as f:
        repeat = json.load(f)
    return curated.promote(LESSON, promote_values(run, repeat), KEYS, [curated.source(SOURCE), curated.source(REPEAT)],
                           promote_environment(run))


if __name__ == "__main__":
    if sys.argv[1:] != ["promote"]:
        sys.exit(f"usage: python -m gpucourse.lessons.{LESSON}.recorded promote")
    print(promote())
