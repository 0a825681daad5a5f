"""A Llama-style decoder written plainly: RMSNorm, rotary position embeddings (RoPE), grouped-query attention (GQA),
a SwiGLU MLP, and an output head tied to the token embedding (as Llama 3.2 1B has it: one vocab x d matrix serves
both, so ``Config.small()`` is 1.236 B parameters, the size of that model).

The weights are a plain dict of tensors (``make_weights``), the layers plain functions of it, in the style of
gpt-fast. Weight matrices are stored as ``(out_features, in_features)`` and applied with ``F.linear``, as
``nn.Linear`` and Hugging Face's Llama store them, so :func:`hf_state_dict` can hand the same tensors to
``transformers``' ``LlamaForCausalLM`` for a like-for-like comparison.

Two KV caches:

* :class:`DynamicCache` grows by ``torch.cat`` every step (what a first implementation does, and what
  ``transformers``' default cache does): each step allocates new cache tensors, and the shapes change every step,
  so nothing can be captured once and replayed.
* :class:`StaticCache` is preallocated at ``max_seq`` positions and written in place at a position held in a
  *tensor* (``index_copy_``); attention reads the whole buffer under a mask of the positions written so far. Every
  step then has the same shapes and the same addresses: a CUDA graph can capture one step and replay it.

Greedy decoding's speed does not depend on the weights' values: every step reads every weight once through dense
matrix products whose work is fixed by the shapes, and there is no data-dependent control flow (no early exit, no
sparsity, and the loop runs a fixed number of steps). Random weights therefore time exactly like trained
ones; they only need to keep activations finite and make greedy decoding produce varied tokens, so that comparing
tokens between implementations means something (see :func:`make_weights` for the scaling).
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from gpucourse import dtypes


@dataclasses.dataclass(frozen=True)
class Config:
    """The decoder's shape. ``head_dim = d_model // n_heads``; ``n_heads`` a multiple of ``n_kv_heads`` (GQA: each
    KV head serves ``n_heads // n_kv_heads`` query heads); ``max_seq``: positions the static cache and the RoPE table
    hold; plain RoPE with base ``rope_theta`` (no Llama 3 frequency scaling: it changes no shape or speed)."""

    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab: int
    max_seq: int = 1024
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} must be a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} must be a multiple of n_kv_heads {self.n_kv_heads} (GQA)")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even (RoPE rotates pairs)")

    @classmethod
    def small(cls, max_seq: int = 1024) -> "Config":
        """Llama 3.2 1B's shape: d 2048, 16 layers, 32 query / 8 KV heads of 64, MLP 8192, vocab 128256, tied head:
        1.236 B parameters, 2.47 GB in bf16 (fits a free T4's 15 GB)."""
        return cls(d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8, d_ff=8192, vocab=128256, max_seq=max_seq)

    @classmethod
    def large(cls, max_seq: int = 1024) -> "Config":
        """Llama 3 8B's shape: d 4096, 32 layers, 32 query / 8 KV heads of 128, MLP 14336, vocab 128256, untied head in
        Llama (tied here: 0.53 B parameters fewer, 7.5 B in all, 15 GB in bf16; an H100's size, not a T4's)."""
        return cls(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab=128256, max_seq=max_seq)

    @classmethod
    def tiny(cls, max_seq: int = 64) -> "Config":
        """A CPU-sized decoder with every part of the small one (GQA ratio 2, head_dim 32); every matrix dimension a
        multiple of 128, so the int4 kernels (groups of 128, tinygemm's tiles) take it too."""
        return cls(d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=256, vocab=256, max_seq=max_seq)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    def layer_params(self) -> int:
        """Parameters of one layer: wq (d x Hq*D), wk and wv (d x Hkv*D each), wo (Hq*D x d), the MLP's gate, up and
        down (3 x d x d_ff) and two RMSNorm weights (2 x d)."""
        d, q, kv = self.d_model, self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        return d * q + 2 * d * kv + q * d + 3 * d * self.d_ff + 2 * d

    @property
    def n_params(self) -> int:
        """Every parameter: the embedding (vocab x d, also the output head), the layers, the final norm (d)."""
        return self.vocab * self.d_model + self.n_layers * self.layer_params() + self.d_model

    def weight_bytes(self, dtype=torch.bfloat16) -> int:
        """Bytes of all weights stored in ``dtype``."""
        return self.n_params * dtypes.nbytes(dtype)

    def kv_bytes_per_position(self, dtype=torch.bfloat16) -> int:
        """Bytes one position of the KV cache takes over all layers: K and V, n_kv_heads x head_dim each."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * dtypes.nbytes(dtype)


# ---------------------------------------------------------------------------------------------------------------------
# Weights.

EMBED_STD = 0.25  # the length of an embedding row (see make_weights)
ATTN_OUT_SCALE = 0.5  # attention's share of the residual stream against the MLP's (see make_weights)


def make_weights(config: Config, device="cpu", dtype=torch.float32, seed: int = 0) -> dict:
    """Random weights, made on ``device`` directly in ``dtype`` from a generator seeded with ``seed`` (the same
    tensors every call on one device; another device's generator gives other values).

    Scales: each projection's entries have standard deviation 1/sqrt(fan_in), so a unit-scale input gives a
    unit-scale output; the two projections that write into the residual stream (wo, w_down) are further divided by
    sqrt(2*n_layers), so the stream grows to about twice its input's scale over the whole depth rather than with
    each layer, and wo by ATTN_OUT_SCALE = 0.5 more: when attention writes as much as the MLP, its average over the
    context feeds the tokens already generated back into the next one and greedy decoding settles into long runs of
    one token (on a 16-layer d-256 model, 17 to 32 distinct tokens out of 128; at half, 124 to 128). The embedding's
    entries have standard deviation EMBED_STD/sqrt(d) (a vector of length 0.25): the lookup adds little to the
    residual stream, so the tied head's logit for the token just read is not far above the rest (with unit-scale
    embeddings a random model repeats its input token forever); the first layer's RMSNorm still gives it full scale.
    The final norm's weight, 1/EMBED_STD, makes the tied head's logits spread about one unit; the layers' RMSNorm
    weights are ones. Varied tokens make comparing two implementations' tokens mean something: they part at the
    first step whose logits differ enough to change the argmax.
    """
    device = torch.device(device)
    g = torch.Generator(device=device)
    g.manual_seed(seed)

    def rand(*shape, std):
        t = torch.randn(*shape, generator=g, device=device, dtype=dtype)
        return t.mul_(std)

    c = config
    d, q, kv = c.d_model, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    out_scale = 1 / math.sqrt(2 * c.n_layers)
    layers = []
    for _ in range(c.n_layers):
        layers.append({
            "attn_norm": torch.ones(d, device=device, dtype=dtype),
            "wq": rand(q, d, std=d ** -0.5), "wk": rand(kv, d, std=d ** -0.5), "wv": rand(kv, d, std=d ** -0.5),
            "wo": rand(d, q, std=q ** -0.5 * out_scale * ATTN_OUT_SCALE),
            "mlp_norm": torch.ones(d, device=device, dtype=dtype),
            "w_gate": rand(c.d_ff, d, std=d ** -0.5), "w_up": rand(c.d_ff, d, std=d ** -0.5),
            "w_down": rand(d, c.d_ff, std=c.d_ff ** -0.5 * out_scale),
        })
    cos, sin = rope_table(c, device, dtype)
    return {"embed": rand(c.vocab, d, std=EMBED_STD * d ** -0.5), "layers": layers,
            "norm": torch.full((d,), 1 / EMBED_STD, device=device, dtype=dtype),
            "rope_cos": cos, "rope_sin": sin}


def rope_table(config: Config, device="cpu", dtype=torch.float32):
    """cos and sin of every position's rotation angles, (max_seq, head_dim), computed in float32 and then stored in
    ``dtype`` (as Hugging Face's Llama does). Angle of pair i at position p: p * theta^(-2i / head_dim); the halves
    convention (pair i = elements i and i + head_dim/2), so both halves carry the same angles."""
    hd = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64, device=device).float() / hd))
    pos = torch.arange(config.max_seq, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def hf_state_dict(weights: dict) -> dict:
    """The weights under ``transformers``' LlamaForCausalLM names (the same tensors, no copies; the tied
    ``lm_head.weight`` is the embedding)."""
    sd = {"model.embed_tokens.weight": weights["embed"], "model.norm.weight": weights["norm"],
          "lm_head.weight": weights["embed"]}
    names = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm", "wq": "self_attn.q_proj",
             "wk": "self_attn.k_proj", "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "w_gate": "mlp.gate_proj",
             "w_up": "mlp.up_proj", "w_down": "mlp.down_proj"}
    for i, lw in enumerate(weights["layers"]):
        for ours, theirs in names.items():
            sd[f"model.layers.{i}.{theirs}.weight"] = lw[ours]
    return sd


# ---------------------------------------------------------------------------------------------------------------------
# Caches.


class DynamicCache:
    """Per layer, K and V of shape (B, Hkv, length, D), grown by ``torch.cat`` each step (new tensors, new shapes)."""

    def __init__(self, n_layers: int):
        self.k = [None] * n_layers
        self.v = [None] * n_layers
        self.length = 0

    def append(self, layer: int, k, v):
        """Add this step's K, V (B, Hkv, T, D) to ``layer``; returns the layer's whole K, V."""
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
        else:
            self.k[layer] = torch.cat([self.k[layer], k], dim=2)
            self.v[layer] = torch.cat([self.v[layer], v], dim=2)
        return self.k[layer], self.v[layer]


@dataclasses.dataclass
class StaticCache:
    """K and V for every layer, (n_layers, B, Hkv, max_seq, D), allocated once. ``k[i]`` is layer i's buffer."""

    k: torch.Tensor
    v: torch.Tensor

    @classmethod
    def empty(cls, config: Config, batch: int = 1, device="cpu", dtype=torch.float32) -> "StaticCache":
        shape = (config.n_layers, batch, config.n_kv_heads, config.max_seq, config.head_dim)
        return cls(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))


# ---------------------------------------------------------------------------------------------------------------------
# The decoder.


def rms_norm(x, weight, eps: float):
    """x / rms(x) * weight, the mean of squares taken in float32 (as Llama does)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rope(x, cos, sin):
    """Rotate x (B, H, T, D) by the angles of its positions: cos, sin (T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def linear(x, w):
    """``x @ w.T`` for a weight stored (out, in) as a tensor, or ``w(x)`` for a weight object that applies itself
    (an int4 weight, see :func:`quantize_weights`)."""
    return F.linear(x, w) if isinstance(w, torch.Tensor) else w(x)


def fuse_weights(weights: dict) -> dict:
    """The same weights with each layer's q, k, v projections stacked into one ``wqkv`` matrix and the MLP's gate and
    up into one ``w_gate_up`` (as gpt-fast and vLLM store them): two matrix-vector products per layer fewer, and the
    ones left larger. The outputs are the same numbers (each output row still comes from one weight row)."""
    layers = []
    for lw in weights["layers"]:
        lw = dict(lw)
        lw["wqkv"] = torch.cat([lw.pop("wq"), lw.pop("wk"), lw.pop("wv")])
        lw["w_gate_up"] = torch.cat([lw.pop("w_gate"), lw.pop("w_up")])
        layers.append(lw)
    return dict(weights, layers=layers)


INT4_GROUP = 128  # weights per float scale along K, as lesson 07 and gpt-fast's int4 use


def quantize_weights(weights: dict, backend: str = "lesson", group_size: int = INT4_GROUP) -> dict:
    """The same model with every matrix of the layers and the output head as int4 weights (a float scale per
    ``group_size`` weights along K, :class:`gpucourse.quant.Int4Linear`), applied by ``backend``: ``"lesson"`` (lesson
    07's GEMV kernel) or ``"tinygemm"`` (PyTorch's ``torch._weight_int4pack_mm``). The head gets its own int4 copy of
    the embedding (the lookup still reads the bf16 rows it needs: one row per token). Norms, RoPE tables and the cache
    stay in the activations' type. The int4 numbers are other weights than the bf16 ones, so an int4 model's tokens
    are compared with its own eager run, not with the bf16 model's."""
    from gpucourse.quant import Int4Linear

    def q(w):
        return Int4Linear(w, group_size=group_size, backend=backend)

    layers = [{k: (q(v) if isinstance(v, torch.Tensor) and v.dim() == 2 else v) for k, v in lw.items()}
              for lw in weights["layers"]]
    return dict(weights, layers=layers, head=q(weights["embed"]))


def cast_weights(weights: dict, dtype) -> dict:
    """The same weights in ``dtype`` (a new dict; tensors converted, int4 weights left as they are)."""
    def cast(v):
        return v.to(dtype) if isinstance(v, torch.Tensor) else v

    return dict({k: cast(v) for k, v in weights.items() if k != "layers"},
                layers=[{k: cast(v) for k, v in lw.items()} for lw in weights["layers"]])


def weight_bytes_read(weights: dict) -> int:
    """Bytes of weights one decode step reads: every matrix of the layers and the head (int4 weights: packed values
    and scales), the norms, and one embedding row."""
    def nbytes(w):
        return w.nbytes if isinstance(w, torch.Tensor) else int(w.nbytes)

    total = sum(nbytes(v) for lw in weights["layers"] for v in lw.values())
    total += nbytes(weights.get("head", weights["embed"])) + nbytes(weights["norm"])
    return total + weights["embed"][0].nbytes


def _layers(weights: dict, config: Config, tokens, positions, attend):
    """The decoder's layers over ``tokens`` (B, T) at ``positions`` (a (T,) tensor); ``attend(i, q, k, v)`` gives
    layer i's attention output (B, Hq, T, D) from this step's q (B, Hq, T, D), k, v (B, Hkv, T, D). Returns the
    last position's logits, (B, vocab), in the weights' dtype (the head only for the token that is decoded next).
    Layers may hold separate ``wq``/``wk``/``wv`` and ``w_gate``/``w_up`` or the fused ones (:func:`fuse_weights`);
    the head is ``weights["head"]`` where present, else the embedding (tied)."""
    c = config
    B, T = tokens.shape
    x = F.embedding(tokens, weights["embed"])
    cos = weights["rope_cos"].index_select(0, positions)
    sin = weights["rope_sin"].index_select(0, positions)
    q_width, kv_width = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    for i, lw in enumerate(weights["layers"]):
        h = rms_norm(x, lw["attn_norm"], c.norm_eps)
        if "wqkv" in lw:
            q, k, v = linear(h, lw["wqkv"]).split([q_width, kv_width, kv_width], dim=-1)
        else:
            q, k, v = linear(h, lw["wq"]), linear(h, lw["wk"]), linear(h, lw["wv"])
        q = q.view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
        k = k.view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = v.view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        o = attend(i, q, k, v)
        x = x + linear(o.transpose(1, 2).reshape(B, T, q_width), lw["wo"])
        h = rms_norm(x, lw["mlp_norm"], c.norm_eps)
        if "w_gate_up" in lw:
            gate, up = linear(h, lw["w_gate_up"]).chunk(2, dim=-1)
        else:
            gate, up = linear(h, lw["w_gate"]), linear(h, lw["w_up"])
        x = x + linear(F.silu(gate) * up, lw["w_down"])
    x = rms_norm(x[:, -1], weights["norm"], c.norm_eps)
    return linear(x, weights.get("head", weights["embed"]))


def forward_dynamic(weights: dict, config: Config, tokens, cache: DynamicCache):
    """Logits of the last of ``tokens`` (B, T), which continue the ``cache.length`` positions the cache holds; the
    cache grows by T."""
    start, T = cache.length, tokens.shape[1]
    positions = torch.arange(start, start + T, device=tokens.device)
    mask = None
    if T > 1:  # query t sees keys 0 .. start + t
        mask = torch.arange(start + T, device=tokens.device)[None, :] <= positions[:, None]

    def attend(i, q, k, v):
        k_all, v_all = cache.append(i, k, v)
        return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, enable_gqa=True)

    logits = _layers(weights, config, tokens, positions, attend)
    cache.length += T
    return logits


def forward_static(weights: dict, config: Config, tokens, positions, cache: StaticCache, attention: str = "sdpa"):
    """Logits of the last of ``tokens`` (B, T) at ``positions`` (a (T,) int64 tensor of consecutive positions),
    writing their K, V into ``cache`` in place. Attention reads the whole preallocated cache under a mask of the
    positions up to each query's (shapes never change, so a CUDA graph can replay it). ``attention="split_kv"``: a
    single-token step attends with :func:`decode_attention.decode_attention` (the split-KV Triton kernel) over the
    cache's first ``position + 1`` entries instead of SDPA with a mask (prompts of several tokens use SDPA)."""
    if attention not in ("sdpa", "split_kv"):
        raise ValueError(f"attention must be 'sdpa' or 'split_kv', not {attention!r}")
    B, T = tokens.shape
    if attention == "split_kv" and T == 1:
        from .decode_attention import decode_attention

        seq_len = (positions[-1:] + 1).repeat(B)  # one length per sequence, in memory (not a stride-0 view)

        def attend(i, q, k, v):
            cache.k[i].index_copy_(2, positions, k)
            cache.v[i].index_copy_(2, positions, v)
            return decode_attention(q[:, :, 0], cache.k[i], cache.v[i], seq_len).unsqueeze(2)
    else:
        mask = torch.arange(config.max_seq, device=tokens.device)[None, :] <= positions[:, None]  # (T, max_seq)

        def attend(i, q, k, v):
            cache.k[i].index_copy_(2, positions, k)
            cache.v[i].index_copy_(2, positions, v)
            return F.scaled_dot_product_attention(q, cache.k[i], cache.v[i], attn_mask=mask, enable_gqa=True)

    return _layers(weights, config, tokens, positions, attend)
