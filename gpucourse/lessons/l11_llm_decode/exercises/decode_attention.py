"""Lesson 11's first exercise: decode attention split over the KV length (flash-decoding), in Triton.

Checked like lesson 08's flash_attention: fresh random inputs per case inside canary memory, the reference computed
by the checker in float64, outputs poisoned, every case run twice (bitwise the same), torch's attention ops and
matmuls forbidden (``forbidden_ops``, both modes) and any torch compute op on the inputs a failure (kind "triton").
What is particular to decoding:

* the lengths are ragged: each sequence attends to its first ``seq_len[b]`` cache positions, and the cache rows past
  its length hold NaN in every case (a real cache holds stale or unwritten rows there), so a kernel that reads past a
  sequence's length, or to S_max, returns NaN;
* in the ragged cases the lengths are odd (or one past a power of two), so no power-of-two split divides them, and
  they include a length of 1 and one of S_max;
* grouped-query attention at ratios Hq / Hkv of 1, 4 and 8: query head h reads KV head h // (Hq // Hkv).

Tolerance: as lesson 08's (the same rounding of the probabilities to the input dtype before the second ``tl.dot``):
rtol = atol_scale = 4e-3 (fp16) and 3e-2 (bf16), atol relative to max|expected|. A combine without the rescale by
2^(m_i - M), a wrong head mapping, or a dropped tail moves whole rows, far outside.

Speed (GPU only): against ``scaled_dot_product_attention`` left to choose its backend (cuDNN's on an H100) with a
length-1 query at 8,192 positions, batch 1, 32 query / 8 KV heads (Llama 3.2 1B's attention), K and V read cold. At
batch 1 there are only 8 (b, KV head) pairs: a kernel that does not split the length leaves most SMs idle and misses
the target; that, not a launch count, is how the check sees the split.
"""
from __future__ import annotations

import math

from gpucourse import device, dtypes
from gpucourse.grading.exercise import ATTENTION_OPS, Case, Exercise, Perf, Tolerance, between

STATEMENT = """\
Write `decode_attention(q, k_cache, v_cache, seq_len)`: attention of one new query token per sequence against its
KV cache, as a decoder computes at every generated token. q is (B, Hq, D); k_cache and v_cache are (B, Hkv, S_max,
D); seq_len is an int32 tensor of B lengths: sequence b attends to cache positions 0 .. seq_len[b] - 1 only (the
lengths differ, 1 <= seq_len[b] <= S_max, and the rows past them are not yours: in the check they hold NaN).
Grouped-query attention: Hq is a multiple of Hkv and query head h uses KV head h // (Hq // Hkv). Return
out[b, h] = softmax(q[b, h] . K^T / sqrt(D)) V over those positions, a new (B, Hq, D) tensor of q's dtype
(float16 or bfloat16; D is 64 or 128; every tensor's last dimension is contiguous: use the strides).
Split over the KV length (flash-decoding): a first kernel with one program per (sequence, KV head, split of the
cache's positions) runs the online softmax over its split for the query heads of that KV head (load each K and V
block once for the whole group) and writes per query head and split a running maximum m, a sum l and an
unnormalised fp32 output o; a second kernel combines the splits of each (sequence, query head):
out = sum_i exp(m_i - M) o_i / sum_i exp(m_i - M) l_i with M = max_i m_i. Size the grid from S_max, never from the
lengths' values: each program loads its sequence's length and does nothing where its split starts past it, and the
combine reads only the splits that hold positions. The lengths are not a multiple of your split size or your blocks:
mask the ragged ends (loads too, with other=0.0, and scores of masked positions -inf).
Reading seq_len on the host (seq_len.max(), .tolist(), int(seq_len[b])) fails the check as a torch op on an input
(on a GPU it would also wait for the GPU every token). Calling torch's matmul, softmax or
scaled_dot_product_attention fails the check too, and so does any torch compute op on the inputs or on anything
derived from them (a copy, a view, a buffer your kernel wrote); allocating, viewing, copying, casting and filling
tensors is fine.
In CPU mode `import gpucourse` makes Triton's interpreter compute bfloat16 as a GPU does (as shipped, it
multiplies bfloat16 tiles in `tl.dot` as raw bits: triton-lang/triton#11584), so bfloat16 tiles go to `tl.dot` as
they are; converting them to float32 there first also works.
On a GPU the check also times your kernels (B 1, Hq 32, Hkv 8, D 64, 8,192 positions, float16) against
scaled_dot_product_attention with a length-1 query, left to choose its backend (cuDNN's on an H100); the speed
target is 0.7x its speed. At batch 1 only B x Hkv = 8 programs exist without a split: most of the GPU would idle.
"""


def _low() -> str:
    # bfloat16 cases need bf16 tensor cores (Ampere and later); a T4 checks them in float16 instead.
    return dtypes.for_device("bfloat16", say=False).dtype


def _randint(gen, lo: int, hi: int) -> int:
    import torch

    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def _odd(gen, lo: int, hi: int) -> int:
    """An odd integer in [lo, hi] (hi >= lo, and the range holds one)."""
    n = _randint(gen, lo, hi)
    return n if n % 2 else (n + 1 if n < hi else n - 1)


def lengths(params: dict, gen) -> list:
    """The B lengths of a case. "full": every sequence S_max; "ones": every sequence 1; "ragged": 1, S_max and odd
    lengths between, in a drawn order; "pow2+1": 2^k + 1 (one position past a power of two) for k from 4 up,
    cycled; "long": S_max for the first sequence, an odd length in [S_max / 2, S_max) for the others."""
    import torch

    b, s, how = params.get("b", 1), params["s"], params.get("lengths", "full")
    if how == "full":
        return [s] * b
    if how == "ones":
        return [1] * b
    if how == "pow2+1":
        past = [2 ** k + 1 for k in range(4, 31) if 2 ** k + 1 <= s]
        return [past[-1 - (i % len(past))] for i in range(b)]
    if how == "long":
        return [s] + [_odd(gen, s // 2, s - 1) for _ in range(b - 1)]
    if how == "ragged":
        out = [1, s] + [_odd(gen, 2, s - 1) for _ in range(b - 2)]
        return [out[i] for i in torch.randperm(b, generator=gen).tolist()]
    raise ValueError(f"unknown lengths {how!r}")


def make_inputs(params: dict, gen) -> tuple:
    """q (B, Hq, D), k_cache and v_cache (B, Hkv, S_max, D) with NaN in every row at or past a sequence's length, and
    seq_len (B,) int32."""
    import torch

    b, hq, hkv, s, d = params.get("b", 1), params["hq"], params["hkv"], params["s"], params["d"]
    dtype = getattr(torch, params.get("dtype", "float16"))
    scale = params.get("scale", 1.0)
    n = lengths(params, gen)
    q = (torch.randn(b, hq, d, generator=gen) * scale).to(dtype)
    k = (torch.randn(b, hkv, s, d, generator=gen) * scale).to(dtype)
    v = torch.randn(b, hkv, s, d, generator=gen).to(dtype)
    for i, length in enumerate(n):
        k[i, :, length:] = float("nan")
        v[i, :, length:] = float("nan")
    return q, k, v, torch.tensor(n, dtype=torch.int32)


def reference(q, k_cache, v_cache, seq_len):
    """On the CPU (every correctness check): attention in float64 over each sequence's first seq_len[b] positions,
    rounded once to q's dtype. On a GPU only the speed baseline of ``Perf(baseline="reference")``, whose case has
    every length equal to S_max: SDPA with a length-1 query and no mask (a mask would rule out its fused backends),
    left to choose its backend (cuDNN's on an H100), what a practitioner's decoder calls."""
    import torch

    if q.is_cuda:
        gqa = k_cache.shape[1] != q.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k_cache, v_cache,
                                                                enable_gqa=gqa).squeeze(2)
    B, Hq, D = q.shape
    G = Hq // k_cache.shape[1]
    out = torch.zeros((B, Hq, D), dtype=torch.float64)
    for b in range(B):
        n = int(seq_len[b])
        k = k_cache[b, :, :n].double().repeat_interleave(G, dim=0)  # (Hq, n, D): head h reads KV head h // G
        v = v_cache[b, :, :n].double().repeat_interleave(G, dim=0)
        s = (k @ q[b].double()[:, :, None]).squeeze(-1) / math.sqrt(D)  # (Hq, n)
        out[b] = (torch.softmax(s, dim=-1)[:, None, :] @ v).squeeze(1)
    return out.to(q.dtype)


def hints(params: dict, args, expected, out) -> list:
    """The checker's hint for a wrong output (``Exercise.hints``): NaN or Inf where attention is finite. Every cache
    row past a sequence's length is NaN in the check, so that is mostly the mark of a kernel that read past a length
    (loads without a mask, a mask against S_max, or a block read whole and masked only in the scores: 0 x NaN is NaN
    in the second dot); the other cause is a combine that divides by a zero sum, where no split covered a
    sequence's positions (a last, partial split skipped)."""
    import torch

    if tuple(out.shape) != tuple(expected.shape) or not out.dtype.is_floating_point:
        return []
    if not bool((~torch.isfinite(out.float()) & torch.isfinite(expected.float())).any()):
        return []
    return ["the cache rows at or past each sequence's length hold NaN in this check (in a decoder they hold stale "
            "or unwritten values): a kernel that reads them returns NaN. Load each sequence's length in the kernel "
            "(tl.load(SEQ + b)), mask the K and V loads with position < length (other=0.0), not with S_max, and set "
            "the scores of those positions to -inf before the maximum. (A combine that divides by a zero sum, where "
            "no split covered a sequence's positions, gives NaN too: a last, partial split holds positions)"]


def kv_bytes(q, k_cache, v_cache, seq_len) -> int:
    """Bytes the call must move in the timed case (every length S_max): K and V read once, q read, out written."""
    return 2 * k_cache.numel() * k_cache.element_size() + 2 * q.numel() * q.element_size()


_S = device.size(cpu=between(150, 250, odd=True), gpu=between(1500, 2500, odd=True))
_LONG = device.size(cpu=between(500, 700, odd=True), gpu=8192)
_LONG_HEADS = device.size(cpu=(8, 2), gpu=(32, 8))
_LOW = _low()

EXERCISE = Exercise(
    id="decode_attention",
    function="decode_attention",
    signature="decode_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, seq_len: Tensor) -> Tensor",
    statement=STATEMENT,
    kind="triton",
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        Case("length 64 = S_max (whole blocks), D=64, Hq=Hkv=4", {"s": 64, "hq": 4, "hkv": 4, "d": 64}),
        Case("every length 1, B=2, GQA 4, D=64", {"b": 2, "s": 37, "hq": 8, "hkv": 2, "d": 64, "lengths": "ones"}),
        # Sizes are drawn fresh for every run (the seed stays with the checker); lengths odd: no split divides them.
        Case("ragged lengths 1..S_max, B=4, GQA 4, D=64",
             {"b": 4, "s": _S, "hq": 8, "hkv": 2, "d": 64, "lengths": "ragged"}),
        Case("ragged lengths, B=3, GQA 8 (Hkv=1), D=128",
             {"b": 3, "s": _S, "hq": 8, "hkv": 1, "d": 128, "lengths": "ragged"}),
        Case(f"ragged lengths, B=3, GQA 1, D=128, {_LOW}",
             {"b": 3, "s": _S, "hq": 4, "hkv": 4, "d": 128, "lengths": "ragged", "dtype": _LOW}),
        Case("lengths one past a power of two (17, 33, 65...), B=4, GQA 4, D=64",
             {"b": 4, "s": _S, "hq": 8, "hkv": 2, "d": 64, "lengths": "pow2+1"}),
        Case("large scores (q, k x10), ragged lengths, B=2, GQA 4, D=64",
             {"b": 2, "s": _S, "hq": 8, "hkv": 2, "d": 64, "lengths": "ragged", "scale": 10.0}),
        Case(f"ragged lengths, B=2, GQA 4, D=64, {_LOW}",
             {"b": 2, "s": _S, "hq": 8, "hkv": 2, "d": 64, "lengths": "ragged", "dtype": _LOW}),
        Case("long context (8,192 positions on a GPU), B=2, GQA 4, D=64",
             {"b": 2, "s": _LONG, "hq": _LONG_HEADS[0], "hkv": _LONG_HEADS[1], "d": 64, "lengths": "long"}),
    ),
    tolerance={"float16": Tolerance(4e-3, 4e-3), "bfloat16": Tolerance(3e-2, 3e-2)},
    determinism="bitwise",
    reference_ops=ATTENTION_OPS,
    forbidden_ops=ATTENTION_OPS,
    hints=hints,
    # The lesson's split-KV kernel ran at 1.02x SDPA's choice among backends (cuDNN) at this shape in bf16 on the
    # course's H100 (benchmarks/results/h100-l11-bench.txt); the target leaves a simpler kernel room, as lesson 08's.
    perf=Perf(baseline="reference", target=0.7, params={"b": 1, "hq": 32, "hkv": 8, "s": 8192, "d": 64},
              bytes=kv_bytes, flush_l2="read"),
)
