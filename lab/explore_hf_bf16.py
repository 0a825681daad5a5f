#!/usr/bin/env python3
"""Lesson 11: on the H100 (the recorded run), ``generate()`` with its default cache parted from the eager loop's
tokens at step 109 where the eager top two logits were 1.09 apart: more than bf16 rounding. Is that generate()'s
arithmetic in bf16, or something of that GPU run?

Runs the benchmark's setting on the CPU in bfloat16: Config.small (1.24 B parameters, the same seed-0 weights), the
same 384-token prompt, 128 greedy tokens, the lesson's eager loop (``decode.eager_dynamic``) against transformers'
``generate()`` with its default cache (``hf_peer.hf_model``), and reports where they part (``decode.near_tie``).
Needs ``transformers`` (not a course dependency) and about 8 GB of memory; about 2 minutes on 2 cores.
Usage: python lab/explore_hf_bf16.py [--prompt 384] [--new 128] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import time

import gpucourse  # noqa: F401  (selects the mode before triton is imported)
import torch

from gpucourse.lessons.l11_llm_decode import decode, hf_peer, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", type=int, default=384)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--out")
    a = ap.parse_args()
    import transformers

    cfg = model.Config.small(max_seq=a.prompt + a.new)
    w = model.make_weights(cfg, "cpu", torch.bfloat16, seed=0)  # the benchmark's weights and prompt (bench._setup)
    prompt = decode.make_prompt(cfg, a.prompt, 1, "cpu", seed=1)
    t0 = time.time()
    ref = decode.eager_dynamic(w, cfg, prompt, a.new, margins=True)
    eager_s = time.time() - t0
    hf = hf_peer.hf_model(cfg, w, torch.bfloat16, torch.device("cpu"))
    t0 = time.time()
    with torch.inference_mode():
        out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=a.new, do_sample=False)
    hf_s = time.time() - t0
    tokens = out[:, a.prompt:]
    tol = decode.tie_tolerance(decode.path_noise(w, cfg, prompt, a.new))
    res = {"device": "cpu", "dtype": "bfloat16", "prompt": a.prompt, "new_tokens": a.new, "n_params": cfg.n_params,
           "agreement": decode.near_tie(ref, tokens, tol), "smallest_margin": float(ref.margins.min()),
           "attn_implementation": hf.config._attn_implementation, "eager_s": eager_s, "generate_s": hf_s,
           "torch": torch.__version__, "transformers": transformers.__version__}
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
