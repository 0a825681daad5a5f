"""Lesson 11: the decoder's shapes and parameter count, the floor's arithmetic against a hand count, the two caches
against each other and against a full recomputation, every ladder step's tokens against the eager loop's (CPU,
float32), the split-KV kernel in Triton's interpreter against float64 attention, its input checks, and the bench
script's command line and a tiny run."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from gpucourse.lessons.l11_llm_decode import analysis, bench, decode, floor, fused_layer, hf_peer, model
from gpucourse.lessons.l11_llm_decode.decode_attention import decode_attention, default_split, reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_PARAMS = 328320  # by hand below


def _tiny(max_seq=48, seed=0):
    cfg = model.Config.tiny(max_seq=max_seq)
    return cfg, model.make_weights(cfg, "cpu", torch.float32, seed=seed)


# -- the model's size and the floor ----------------------------------------------------------------------------------


def test_tiny_parameters_and_floor_against_a_hand_count():
    cfg = model.Config.tiny()
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) == (128, 2, 4, 2, 32)
    embed = 256 * 128  # the tied head reads the same matrix
    layer = 128 * 128 + 2 * (128 * 64) + 128 * 128 + 3 * 128 * 256 + 2 * 128  # wq, wk+wv (2 KV heads of 32), wo, MLP,
    assert cfg.n_params == embed + 2 * layer + 128 == TINY_PARAMS  # norms; then the final norm
    assert cfg.weight_bytes(torch.float32) == 4 * TINY_PARAMS
    kv = 2 * 2 * 2 * 32 * 10  # K and V, 2 layers, 2 KV heads of 32, 10 positions
    assert floor.bytes_per_token(cfg, 10, torch.float32) == 4 * (TINY_PARAMS + kv)
    assert floor.bytes_per_token(cfg, 10) == 2 * (TINY_PARAMS + kv)  # bf16 by default
    assert floor.bytes_per_token(cfg, 10, "bf16") == floor.bytes_per_token(cfg, 10, 2)
    assert floor.tokens_per_second_floor(cfg, 1e9, 10) == pytest.approx(1e9 / (2 * (TINY_PARAMS + kv)), rel=1e-12)
    assert floor.tokens_per_second_floor(cfg, 1e9, 0, dtype=torch.float32) == pytest.approx(1e9 / (4 * TINY_PARAMS))
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        floor.tokens_per_second_floor(cfg, 0, 10)
    with pytest.raises(ValueError, match="context must be >= 0"):
        floor.bytes_per_token(cfg, -1)


def test_small_config_is_llama_3_2_1b_sized():
    cfg = model.Config.small()
    assert cfg.n_params == 1_235_814_400
    assert cfg.weight_bytes(torch.bfloat16) == 2_471_628_800
    assert cfg.kv_bytes_per_position(torch.bfloat16) == 2 * 16 * 8 * 64 * 2
    assert floor.bytes_per_token(cfg, 512) == 2_471_628_800 + 512 * 32768
    assert floor.tokens_per_second_floor(cfg, 3.0e12, 512) == pytest.approx(1205.59, abs=0.01)


def test_config_rejects_heads_that_do_not_group():
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        model.Config(d_model=64, n_layers=1, n_heads=4, n_kv_heads=3, d_ff=64, vocab=16)


def test_weights_are_deterministic_and_scaled():
    cfg, w = _tiny()
    _, w2 = _tiny()
    _, w3 = _tiny(seed=1)
    assert torch.equal(w["layers"][1]["w_down"], w2["layers"][1]["w_down"])
    assert not torch.equal(w["layers"][1]["w_down"], w3["layers"][1]["w_down"])
    assert w["embed"].std().item() == pytest.approx(model.EMBED_STD / 128 ** 0.5, rel=0.1)  # 0.25 / sqrt(d)
    assert w["layers"][0]["wq"].std().item() == pytest.approx(1 / 128 ** 0.5, rel=0.1)
    sd = model.hf_state_dict(w)
    assert len(sd) == 3 + 9 * cfg.n_layers and sd["lm_head.weight"] is w["embed"]


# -- the caches -------------------------------------------------------------------------------------------------------


@torch.inference_mode()
def test_static_cache_gives_the_growing_caches_logits_and_a_full_recomputation_agrees():
    cfg, w = _tiny()
    prompt = decode.make_prompt(cfg, 7)
    dyn = model.DynamicCache(cfg.n_layers)
    static = model.StaticCache.empty(cfg, 1, "cpu", torch.float32)
    split = model.StaticCache.empty(cfg, 1, "cpu", torch.float32)
    seq = prompt
    a = model.forward_dynamic(w, cfg, prompt, dyn)
    b = model.forward_static(w, cfg, prompt, torch.arange(7), static)
    model.forward_static(w, cfg, prompt, torch.arange(7), split, attention="split_kv")
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for step in range(5):
        tok = a.argmax(-1, keepdim=True)
        seq = torch.cat([seq, tok], dim=1)
        pos = torch.tensor([7 + step])
        a = model.forward_dynamic(w, cfg, tok, dyn)
        b = model.forward_static(w, cfg, tok, pos, static)
        c = model.forward_static(w, cfg, tok, pos, split, attention="split_kv")
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5)
    # The whole sequence in one pass (no cache reused) gives the last step's logits: positions and caches line up.
    full = model.forward_dynamic(w, cfg, seq, model.DynamicCache(cfg.n_layers))
    torch.testing.assert_close(full, a, rtol=1e-5, atol=1e-5)
    assert dyn.length == 12 and dyn.k[0].shape == (1, 2, 12, 32)


def test_decoder_equals_transformers_llama_on_the_same_weights():
    """Where transformers is installed: its LlamaForCausalLM, given these weights (bench's mapping), computes the same
    logits (the decoder is Llama: RoPE's convention, GQA, RMSNorm, SwiGLU, the tied head)."""
    pytest.importorskip("transformers")
    cfg, w = _tiny()
    hf = hf_peer.hf_model(cfg, w, torch.float32, "cpu")
    prompt = decode.make_prompt(cfg, 9)
    with torch.inference_mode():
        theirs = hf(prompt).logits[:, -1]
        ours = model.forward_dynamic(w, cfg, prompt, model.DynamicCache(cfg.n_layers))
    torch.testing.assert_close(ours, theirs.float(), rtol=1e-4, atol=1e-4)


def test_generate_gives_the_eager_loops_tokens_in_float32():
    """Where transformers is installed: generate() with its default (growing) cache, greedy, in float32, decodes the
    eager loop's 128 tokens after a 384-token prompt, the benchmark's context (so a GPU divergence in bf16 is the
    arithmetic's, not the model's)."""
    pytest.importorskip("transformers")
    cfg = model.Config.tiny(max_seq=512)
    w = model.make_weights(cfg, "cpu", torch.float32)
    prompt = decode.make_prompt(cfg, 384)
    ref = decode.eager_dynamic(w, cfg, prompt, 128)
    hf = hf_peer.hf_model(cfg, w, torch.float32, "cpu")
    with torch.inference_mode():
        out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=128, do_sample=False)
    assert decode.first_divergence(ref.tokens, out[:, 384:]) is None


# -- the ladder ------------------------------------------------------------------------------------------------------


def test_every_ladder_step_gives_the_eager_loops_tokens_on_cpu():
    cfg, w = _tiny()
    prompt = decode.make_prompt(cfg, 8, batch=2)
    base = decode.eager_dynamic(w, cfg, prompt, 16)
    assert base.tokens.shape == (2, 16) and base.steps == 15 and base.tokens_per_s > 0
    assert len(set(base.tokens.flatten().tolist())) >= 4  # random weights still give varied tokens
    runs = [decode.eager_static(w, cfg, prompt, 16), decode.eager_static(w, cfg, prompt, 16, attention="split_kv"),
            decode.compiled(w, cfg, prompt, 16, backend="aot_eager", mode="default")]
    for r in runs:
        assert decode.first_divergence(base.tokens, r.tokens) is None, r.name
    g = decode.graphs(w, cfg, prompt, 16)
    assert g.tokens is None and "skipped in CPU mode" in g.skipped and math.isnan(g.tokens_per_s)


def test_fused_weights_give_the_same_logits_and_int4_weights_decode_as_their_own_eager_loop():
    cfg, w = _tiny(max_seq=24)
    prompt = decode.make_prompt(cfg, 8)
    fw = model.fuse_weights(w)
    assert set(fw["layers"][0]) == {"attn_norm", "wqkv", "wo", "mlp_norm", "w_gate_up", "w_down"}
    assert fw["layers"][0]["wqkv"].shape == (128 + 2 * 64, 128) and fw["layers"][0]["w_gate_up"].shape == (512, 128)
    assert "wq" in w["layers"][0]  # the original dict is left as it was
    pos = torch.arange(8)
    a = model.forward_static(w, cfg, prompt, pos, model.StaticCache.empty(cfg))
    b = model.forward_static(fw, cfg, prompt, pos, model.StaticCache.empty(cfg))
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # int4 (tinygemm's CPU twin: the lesson kernel's interpreter run is covered by tests/test_quant_kit.py)
    bw = model.cast_weights(fw, torch.bfloat16)
    assert bw["layers"][1]["wqkv"].dtype == torch.bfloat16 and fw["layers"][1]["wqkv"].dtype == torch.float32
    qw = model.quantize_weights(bw, backend="tinygemm")
    assert model.weight_bytes_read(qw) < model.weight_bytes_read(bw) / 3
    logits = model.forward_static(qw, cfg, prompt, pos, model.StaticCache.empty(cfg, dtype=torch.bfloat16))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    ref = decode.eager_dynamic(qw, cfg, prompt, 8, margins=True)
    assert ref.margins.shape == (1, 8) and (ref.margins >= 0).all()
    run = decode.eager_static(qw, cfg, prompt, 8)
    tol = decode.tie_tolerance(decode.path_noise(qw, cfg, prompt, 8, attention="sdpa"))
    assert decode.near_tie(ref, run.tokens, tol)["within"]
    # the int4 model is another model: its tokens are not the bf16 one's, and it is judged against its own loop
    assert bench._agreement({"tokens": ref.tokens.tolist(), "margins": ref.margins.tolist()}, run.tokens.tolist(),
                            tol)["near_tie"]


# -- the fused layer (section 7): its kernels in Triton's interpreter ------------------------------------------------


@pytest.mark.parametrize("n,k", [(37, 100), (64, 128), (5, 300)])  # rows and K not multiples of the blocks
def test_fused_gemv_equals_torch_with_each_prologue_and_epilogue(n, k):
    torch.manual_seed(n + k)
    x, norm_w, res = torch.randn(k), torch.rand(k) + 0.5, torch.randn(n)
    w, w2 = torch.randn(n, k), torch.randn(2 * n, k)
    h = model.rms_norm(x, norm_w, 1e-5)
    cases = [(fused_layer.gemv(x, w), w @ x),
             (fused_layer.gemv(x, w, norm=norm_w), w @ h),
             (fused_layer.gemv(x, w, residual=res), res + w @ x),
             (fused_layer.gemv(x, w2, norm=norm_w, gated=True),
              torch.nn.functional.silu(w2[:n] @ h) * (w2[n:] @ h))]
    for i, (got, want) in enumerate(cases):
        assert got.shape == want.shape, i
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"case {i}")
    with pytest.raises(ValueError, match=r"x must be \(100,\)|x must be \(128,\)|x must be \(300,\)"):
        fused_layer.gemv(x[:-1], w)


def test_rope_cache_rotates_q_and_k_and_writes_the_cache_at_the_position():
    cfg, w = _tiny()
    fw = model.fuse_weights(w)
    cache = model.StaticCache.empty(cfg)
    pos = 11
    qkv = torch.randn(fw["layers"][0]["wqkv"].shape[0])
    q = fused_layer.rope_cache(qkv, fw["rope_cos"], fw["rope_sin"], torch.tensor([pos]), cache.k[0][0], cache.v[0][0],
                               cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
    qw, kw = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    cos, sin = fw["rope_cos"][pos], fw["rope_sin"][pos]
    want_q = model.rope(qkv[:qw].view(1, cfg.n_heads, 1, -1), cos, sin).view(cfg.n_heads, -1)
    want_k = model.rope(qkv[qw:qw + kw].view(1, cfg.n_kv_heads, 1, -1), cos, sin).view(cfg.n_kv_heads, -1)
    torch.testing.assert_close(q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache.k[0][0, :, pos], want_k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache.v[0][0, :, pos], qkv[qw + kw:].view(cfg.n_kv_heads, -1))
    others = [p for p in range(cfg.max_seq) if p != pos]
    assert not cache.k[0][0, :, others].any() and not cache.v[0][0, :, others].any()  # nothing written elsewhere


def test_triton_layer_gives_the_eager_loops_tokens_and_refuses_what_it_cannot_decode():
    cfg, w = _tiny()
    fw = model.fuse_weights(w)
    prompt = decode.make_prompt(cfg, 8)
    base = decode.eager_dynamic(w, cfg, prompt, 10)
    r = fused_layer.triton_layer(fw, cfg, prompt, 10)
    assert r.name == "triton_layer" and r.steps == 9
    assert torch.equal(r.tokens, base.tokens)
    with pytest.raises(ValueError, match="batch 1 with fused weights"):
        fused_layer.triton_layer(w, cfg, prompt, 4)  # unfused weights
    with pytest.raises(ValueError, match="batch 1 with fused weights"):
        fused_layer.triton_layer(fw, cfg, decode.make_prompt(cfg, 8, batch=2), 4)


@pytest.mark.gpu
def test_gpu_fused_gemvs_at_the_lessons_shapes_and_the_layer_in_a_graph():
    """On a GPU, with the block sizes the lesson times (not the interpreter's): each fused GEMV of Config.small's
    layer against torch in bf16, then the Triton layer's tokens against the eager loop's up to a near-tie."""
    torch.manual_seed(0)
    c = model.Config.small()
    bf = torch.bfloat16
    x, xf, nw = (torch.randn(n, device="cuda", dtype=bf) for n in (c.d_model, c.d_ff, c.d_model))
    f = torch.nn.functional
    for rows, k, inp, kw in ((3072, c.d_model, x, dict(norm=nw)), (c.d_model, c.d_model, x, dict(residual=x)),
                             (2 * c.d_ff, c.d_model, x, dict(norm=nw, gated=True)),
                             (c.d_model, c.d_ff, xf, dict(residual=x))):
        w = torch.randn(rows, k, device="cuda", dtype=bf) / k ** 0.5
        h = model.rms_norm(inp, kw["norm"], c.norm_eps) if "norm" in kw else inp
        if kw.get("gated"):
            g, u = f.linear(h, w).chunk(2)
            want = f.silu(g) * u
        else:
            want = f.linear(h, w) + (kw["residual"] if "residual" in kw else 0)
        got = fused_layer.gemv(inp, w, eps=c.norm_eps, **kw)
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2, msg=f"{rows} x {k} {kw.keys()}")
    cfg = model.Config.tiny(max_seq=48)
    fw = model.fuse_weights(model.make_weights(cfg, "cuda", bf, seed=0))
    prompt = decode.make_prompt(cfg, 8, device="cuda")
    ref = decode.eager_dynamic(fw, cfg, prompt, 24, margins=True)
    r = fused_layer.triton_layer(fw, cfg, prompt, 24, warmup=1)
    tie = decode.near_tie(ref, r.tokens, decode.tie_tolerance(decode.path_noise(fw, cfg, prompt, 24)))
    assert tie["within"], tie


def test_near_tie_judges_a_divergence_by_the_reference_margin():
    ref = decode.Run("ref", torch.tensor([[1, 2, 3, 4]]), 1.0, 3, margins=torch.tensor([[2.0, 0.01, 0.5, 0.02]]))
    assert decode.near_tie(ref, torch.tensor([[1, 2, 3, 4]]), 0.0) == {"equal": True, "first_divergence": None,
                                                                      "margin": None, "within": True}
    tie = decode.near_tie(ref, torch.tensor([[1, 9, 9, 9]]), 0.2)
    assert (tie["equal"], tie["first_divergence"], tie["within"]) == (False, 1, True)
    assert tie["margin"] == pytest.approx(0.01)
    assert not decode.near_tie(ref, torch.tensor([[1, 2, 7, 4]]), 0.2)["within"]  # margin 0.5: a real difference
    assert not decode.near_tie(ref, torch.tensor([[1, 9, 9, 9]]), tolerance=0.0)["within"]
    one = {"tokens": [[1, 2, 3, 4]], "margins": [[2.0, 0.01, 0.5, 0.02]]}
    j = bench._agreement(one, [[1, 2, 3, 5]], 0.2)
    assert j == {"tokens_equal_eager": False, "first_divergence": 3, "margin_at_divergence": pytest.approx(0.02),
                 "near_tie": True}
    assert bench._agreement(one, [[1, 2, 3, 5]], None)["near_tie"] is None  # no measured tolerance: not judged
    assert bench._agreement(one, [[1, 2, 3, 4]], None)["near_tie"] is True  # equal tokens need none
    # float32 runs must agree exactly; a 16-bit run is judged by twice its measured path noise
    assert bench._tolerance({"eager_dynamic": {"path_noise": {"max_abs": 0.1}}}, torch.float32) == 0.0
    assert bench._tolerance({"eager_dynamic": {"path_noise": {"max_abs": 0.1}}}, torch.bfloat16) == pytest.approx(0.2)
    assert bench._tolerance({"eager_dynamic": {}}, torch.bfloat16) is None
    assert not bench._agreement(one, [[1, 2, 3, 5]], 0.0)["near_tie"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_path_noise_bounds_where_two_correct_paths_can_part(dtype):
    """Teacher-forced, the static cache with split-KV attention against the eager loop: float32 paths agree to
    rounding and never flip; in bf16 they differ by more, and wherever their argmaxes differ the eager top two were
    within tie_tolerance (twice the largest difference), the bound the near-tie check relies on."""
    cfg = model.Config.tiny(max_seq=40)
    w = model.make_weights(cfg, "cpu", dtype, seed=0)
    prompt = decode.make_prompt(cfg, 8)
    noise = decode.path_noise(w, cfg, prompt, 32)
    assert len(noise["per_position"]) == len(noise["margins"]) == 32
    assert noise["max_abs"] == max(noise["per_position"])
    tol = decode.tie_tolerance(noise)
    assert all(noise["margins"][i] <= tol for i in noise["flips"])
    if dtype == torch.float32:
        assert noise["max_abs"] < 1e-4 and noise["flips"] == []
    else:
        assert noise["max_abs"] > 1e-3  # bf16 rounding: the paths are not bit-identical


def test_first_divergence_and_length_checks():
    a = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]])
    b = a.clone()
    assert decode.first_divergence(a, b) is None
    b[1, 3], b[0, 2] = 9, 9
    assert decode.first_divergence(a, b) == (0, 2)
    cfg, w = _tiny(max_seq=16)
    with pytest.raises(ValueError, match="exceed config.max_seq"):
        decode.eager_static(w, cfg, decode.make_prompt(cfg, 10), 8)


# -- the split-KV kernel ---------------------------------------------------------------------------------------------


def _attention_inputs(hq, hkv, d, s_max, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(3, hq, d, generator=g).to(dtype)
    k = torch.randn(3, hkv, s_max, d, generator=g).to(dtype)
    v = torch.randn(3, hkv, s_max, d, generator=g).to(dtype)
    return q, k, v


@pytest.mark.parametrize("ratio", [1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_kv_kernel_equals_float64_attention_on_ragged_lengths(ratio, dtype):
    q, k, v = _attention_inputs(2 * ratio, 2, 64, 64, dtype, seed=ratio)
    seq_len = torch.tensor([1, 37, 64])
    ref = reference(q, k, v, seq_len)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for split in (20, 7, None):  # 37 and 64 are multiples of neither
        out = decode_attention(q, k, v, seq_len, split_size=split)
        assert out.shape == q.shape and out.dtype == dtype
        torch.testing.assert_close(out.double(), ref, **tol, msg=lambda m: f"split {split}: {m}")


def test_split_kv_kernel_at_d128_with_a_zero_length_and_positions_past_the_length_ignored():
    q, k, v = _attention_inputs(4, 2, 128, 40, torch.float32, seed=3)
    seq_len = torch.tensor([0, 40, 25], dtype=torch.int32)
    out = decode_attention(q, k, v, seq_len, split_size=16)
    torch.testing.assert_close(out.double(), reference(q, k, v, seq_len), rtol=1e-5, atol=1e-5)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    k2, v2 = k.clone(), v.clone()
    k2[2, :, 25:] = float("nan")  # never read
    v2[2, :, 25:] = float("nan")
    assert torch.equal(decode_attention(q, k2, v2, seq_len, split_size=16)[2], out[2])


def test_default_split_fills_the_gpu_with_programs():
    assert default_split(1, 8, 8192) == 256  # 32 splits x 8 KV heads = 256 programs for 132 SMs
    assert default_split(1, 8, 512) == 64
    assert default_split(64, 8, 512) == 512


@pytest.mark.parametrize("case, match", [
    ("q4d", r"q must be \(B, Hq, D\)"),
    ("group", "must be a multiple of Hkv=3"),
    ("cache", "k_cache and v_cache must both be"),
    ("batch", "disagree on the batch B or the head dimension D"),
    ("dim", "head dimension D must be one of"),
    ("dtype", "of one dtype"),
    ("seq_shape", r"seq_len must be an int32 or int64 tensor of shape \(3,\)"),
    ("seq_float", "seq_len must be an int32 or int64"),
    ("seq_range", r"seq_len must lie in \[0, S_max=64\]"),
])
def test_bad_inputs_raise_clear_errors(case, match):
    q, k, v = _attention_inputs(4, 2, 64, 64, torch.float32, seed=0)
    s = torch.tensor([1, 2, 3])
    k3, v3 = k[:, :1].expand(3, 3, 64, 64), v[:, :1].expand(3, 3, 64, 64)  # 3 KV heads for 4 query heads
    args = {"q4d": (q[:, :, None], k, v, s), "group": (q, k3, v3, s),
            "cache": (q, k, v[:, :, :10], s), "batch": (q[:2], k, v, s),
            "dim": (q[..., :48], k[..., :48], v[..., :48], s), "dtype": (q, k.half(), v, s),
            "seq_shape": (q, k, v, s[:2]), "seq_float": (q, k, v, s.float()),
            "seq_range": (q, k, v, torch.tensor([1, 65, 3]))}[case]
    with pytest.raises(ValueError, match=match):
        decode_attention(*args)


# -- the bench script ------------------------------------------------------------------------------------------------


def test_bench_help_runs_on_cpu():
    out = subprocess.run([sys.executable, "-m", bench.MODULE, "--help"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--tiny" in out.stdout and "--out" in out.stdout and "--steps" in out.stdout


def test_bench_tiny_run_writes_json(tmp_path, capsys):
    path = tmp_path / "l11.json"
    doc = bench.main(["--tiny", "--in-process", "--compile-backend", "aot_eager", "--out", str(path)])
    saved = json.loads(path.read_text())
    assert saved["n_params"] == TINY_PARAMS and saved["context"] == 16 and saved["dtype"] == "float32"
    assert saved["floor"]["tokens_per_s"] > 0
    rows = {r["step"]: r for r in saved["ladder"]}
    for name in ("eager_dynamic", "eager_static", "compiled", "triton_layer"):
        assert rows[name]["tokens_equal_eager"] is True, rows[name]
        assert rows[name]["tokens_per_s"] > 0 and rows[name]["fraction_of_floor"] > 0
    assert "skipped in CPU mode" in rows["graphs"]["note"]
    kern = saved["steps"]["kernel"]["contexts"]
    assert set(kern) == {"64", "200"}
    assert kern["200"]["impls"]["split-KV (Triton)"]["max_abs_diff_vs_math"] < 1e-4
    assert doc["ladder"] == saved["ladder"]
    assert "tokens/s" in capsys.readouterr().out


def test_bench_budget_and_child_time_limit(tmp_path):
    doc = bench.main(["--tiny", "--budget", "0", "--steps", "eager_dynamic,graphs"])
    assert doc["steps"]["eager_dynamic"]["skipped"].startswith("out of time")
    assert "skipped in CPU mode" in doc["steps"]["graphs"]["skipped"]
    a = bench._args(["--tiny"])
    res = bench._child("kernel", a, ["--tiny"], limit=0.5)
    assert res["error"].startswith("timed out")
    res = bench._child("eager_dynamic", a, ["--tiny"], limit=120)
    assert "error" not in res, res
    assert len(res["tokens"][0]) == 8 and res["tokens_per_s"] > 0


def test_a_model_too_large_for_the_gpu_is_skipped_with_its_size(monkeypatch):
    """On a T4 (15.8 GB) --large's weights (15.0 GB in bf16) leave no room to run: each model step is skipped with
    the sizes and what to run instead, not started into an out-of-memory error; the bandwidth step and the default
    model (2.5 GB) still run."""
    import types

    monkeypatch.setattr(bench.device, "on_gpu", lambda: True)
    monkeypatch.setattr(bench, "_dtype", lambda a: torch.bfloat16)
    monkeypatch.setattr(bench.torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(total_memory=15.8e9))
    why = bench._skip_reason("compiled", bench._args(["--large"]))
    assert why.startswith("the model's weights take 15.0 GB in bfloat16, more than this GPU's 15.8 GB"), why
    assert why.endswith("(Config.large is Llama 3 8B's shape; run without --large)")
    assert bench._skip_reason("bandwidth", bench._args(["--large"])) is None
    assert bench._skip_reason("compiled", bench._args([])) is None


# -- the recorded H100 run and what the notebook computes from it ----------------------------------------------------


def test_recorded_values_are_the_promoted_bench_run():
    """The curated file holds what its promote step takes from the benchmark's run, under declared keys only."""
    from gpucourse.lessons.l11_llm_decode import recorded

    doc = recorded.load()
    assert set(doc) == set(recorded.KEYS) and [s["file"] for s in doc.sources] == [recorded.SOURCE, recorded.REPEAT]
    with open(os.path.join(ROOT, recorded.SOURCE)) as f:
        run = json.load(f)
    with open(os.path.join(ROOT, recorded.REPEAT)) as f:
        repeat = json.load(f)
    assert recorded.promote_values(run, repeat) == dict(doc)
    assert set(doc["repeat"]) == {r["step"] for r in repeat["ladder"]} and doc["repeat"]["compiled"] > 0
    assert doc.environment == recorded.promote_environment(run) and doc.environment["transformers"]
    assert [r["step"] for r in doc["ladder"]] == list(recorded.LADDER_STEPS)
    assert [r["step"] for r in doc["peers"]] == list(recorded.PEER_STEPS)
    assert "not measured here" in recorded.label(doc) and recorded.file_name() in recorded.label(doc)
    with pytest.raises(KeyError, match="declares no key"):
        doc["steps"]


def test_promote_writes_a_file_that_loads_back_equal(tmp_path, monkeypatch):
    from gpucourse import recorded as curated
    from gpucourse.lessons.l11_llm_decode import recorded

    committed = dict(recorded.load())
    monkeypatch.setattr(curated, "recorded_dir", lambda: str(tmp_path))
    path = recorded.promote()
    assert path == str(tmp_path / "h100-l11_llm_decode.json")
    again = recorded.load()
    assert dict(again) == committed and again.keys_described == recorded.KEYS
    run = {"ladder": [{"step": "eager_dynamic", "tokens_per_s": 1.0}], "steps": {}}
    with pytest.raises(ValueError, match="steps without a result"):
        recorded.promote_values(run)


def test_recorded_figures_the_lesson_prints():
    from gpucourse.lessons.l11_llm_decode import recorded

    doc = recorded.load()
    assert recorded.best_ladder(doc)["step"] == "triton_layer"
    speed = recorded.speed(doc)
    assert set(speed) == {*recorded.LADDER_STEPS, *recorded.INT4_STEPS, *recorded.PEER_STEPS}
    assert [r["step"] for r in doc["int4"]] == list(recorded.INT4_STEPS)
    assert {r["backend"] for r in doc["int4"]} == {"lesson", "tinygemm"}
    assert all(r["weight_bytes"] < doc["floor"]["bytes_per_token"] / 3 for r in doc["int4"])
    assert all(r["near_tie"] for r in doc["ladder"])  # every GPU step agrees with eager up to a near-tie
    assert doc["near_tie"]["tolerance"] == pytest.approx(2 * doc["near_tie"]["path_noise"])
    assert all(r["margin_at_divergence"] <= doc["near_tie"]["tolerance"] for r in doc["ladder"]
               if r["first_divergence"] is not None)
    assert doc["profile"]["after"]["gpu_events"] < doc["profile"]["before"]["gpu_events"]
    r = recorded.split_kv_ratios(doc)
    assert set(r) == {"512", "8192"} and all(name.startswith("SDPA") for name in r["8192"])
    best = doc["decode_attention"]["8192"]["best_sdpa"]
    assert r["8192"][best] == pytest.approx(doc["decode_attention"]["8192"]["split_kv_over_best_sdpa"])
    assert r["8192"][best] == min(r["8192"].values())  # the best backend is the one the kernel gains least on
    assert doc["floor"]["tokens_per_s"] == pytest.approx(
        floor.tokens_per_second_floor(model.Config.small(), doc["floor"]["bandwidth_gbps"] * 1e9,
                                      doc["run"]["context"]))


def test_targets_are_met_or_missed_and_unknown_figures_refused():
    t = analysis.targets(fraction_of_floor=0.484, over_hf_default=11.3, over_hf_static=None)
    assert [(x["goal"], x["met"]) for x in t] == [(0.70, False), (10.0, True)]
    t = analysis.targets(split_kv_over_best_sdpa=1.5)
    assert len(t) == 1 and t[0]["met"] and t[0]["op"] == ">="
    with pytest.raises(KeyError, match="unknown figures"):
        analysis.targets(fraction=0.5)


def test_kernel_categories_and_the_breakdown_per_token():
    assert analysis.kernel_category("nvjet_sm90_tst_128x8_64x5_1x1_h_bz_coopA_TNT") == "matmul (GEMV)"
    assert analysis.kernel_category("triton_tem_fused_mm_3") == "matmul (GEMV)"
    assert analysis.kernel_category("triton_red_fused_argmax_7") == "argmax (the next token)"
    assert analysis.kernel_category("cudnn_generated_fort_native_sdpa_sm90") == "attention"
    assert analysis.kernel_category("split_kv_kernel") == "attention"
    assert analysis.kernel_category("triton_poi_fused_add_mul_rsqrt_2").startswith("other fused")
    assert analysis.kernel_category("Memcpy DtoD (Device -> Device)") == "copies and fills"
    assert analysis.kernel_category("some_unknown_kernel") == "other"
    b = analysis.breakdown([("nvjet_a", 10.0), ("nvjet_head", 90.0), ("triton_poi_fused_add_0", 2.0),
                         ("nvjet_a", 10.0), ("nvjet_head", 90.0), ("triton_poi_fused_add_0", 2.0)], tokens=2)
    assert b["kernels_per_token"] == 3 and b["gpu_us_per_token"] == pytest.approx(102.0)
    assert list(b["categories"]) == ["matmul (GEMV)", "other fused kernels (norms, RoPE, SiLU, adds)"]
    assert b["categories"]["matmul (GEMV)"] == {"kernels": 2, "us": 100.0}
    assert b["head"] == {"name": "nvjet_head", "us": 90.0}
    assert b["by_name"] == [{"name": "nvjet_head", "category": "matmul (GEMV)", "kernels": 1, "us": 90.0},
                            {"name": "nvjet_a", "category": "matmul (GEMV)", "kernels": 1, "us": 10.0},
                            {"name": "triton_poi_fused_add_0", "category": "other fused kernels (norms, RoPE, SiLU, "
                                                                          "adds)", "kernels": 1, "us": 2.0}]
    assert analysis.breakdown([], 1)["head"] is None


def test_ops_per_token_counts_one_eager_step():
    cfg, w = _tiny(max_seq=16)
    ops = analysis.ops_per_token(w, cfg, decode.make_prompt(cfg, 4))
    assert ops["linear"] == 7 * cfg.n_layers + 1  # q, k, v, o, gate, up, down per layer, then the head
    assert ops["scaled_dot_product_attention"] == cfg.n_layers and ops["argmax"] == 1
    assert "to" not in ops and "view" not in ops  # float32 to float32 and views run no kernel
    bf16 = analysis.ops_per_token(model.make_weights(cfg, dtype=torch.bfloat16), cfg, decode.make_prompt(cfg, 4))
    assert bf16["to"] > 0 and sum(bf16.values()) > sum(ops.values())
    assert analysis.token_profile(w, cfg, decode.make_prompt(cfg, 4)) is None  # GPU only
    a = bench.settings(["--prompt", "16", "--new-tokens", "4"])
    assert (a.prompt, a.new_tokens, a.contexts) == (16, 4, [512, 8192])
