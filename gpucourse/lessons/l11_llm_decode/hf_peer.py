"""The practitioner's peer for lesson 11: Hugging Face ``transformers``' ``LlamaForCausalLM.generate()`` on the same
config and the same weights (``model.hf_state_dict``), with its default (dynamic) cache or
``cache_implementation="static"``. Its decode rate is (n - 1) / (time of n tokens - time of 1 token): the prefill taken
out, as the ladder's timing does. Imported only where ``transformers`` is installed."""
from __future__ import annotations

import time

import torch

from . import model


def hf_model(cfg: model.Config, weights: dict, dt, dev):
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


def step(a, setup: tuple, static: bool) -> dict:
    import transformers

    cfg, w, prompt = setup
    dev = prompt.device
    hf = hf_model(cfg, w, w["embed"].dtype, dev)
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
