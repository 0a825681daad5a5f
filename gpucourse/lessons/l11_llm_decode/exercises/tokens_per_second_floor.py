"""Lesson 11's second exercise: the bandwidth floor of batch-1 decoding, on paper.

Judged (``JudgedExercise``): every case draws fresh decoder shapes (the lesson's ``Config``), contexts and bandwidths
from the check's secret seed and compares the learner's number with :func:`..floor.tokens_per_second_floor` (bf16:
every weight and the K and V of ``context`` positions in every layer read once per token), within a relative 1e-6.
Where a wrong number equals what a known slip gives (the KV cache left out, bits for bytes, the query heads' count
for the cache's...), the message names the slip.
"""
from __future__ import annotations

import math
import numbers
import random

from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

from .. import floor, model

RTOL = 1e-6
N_DRAWS = 6  # shapes per case
ELEMENT = 2  # bytes of a bf16 weight or cache element

STATEMENT = """\
Write `tokens_per_second_floor(config, bandwidth_bytes_per_s, context)`: the most tokens per second batch-1
decoding of the lesson's decoder can produce at `context` positions on a GPU whose memory delivers
`bandwidth_bytes_per_s` bytes per second, as a float. Each token runs the whole model on one position, so it reads
every weight once and, in every layer, the K and V cache of all `context` positions; the time per token is at least
those bytes over the bandwidth. Weights and cache are bfloat16. `config` is the lesson's `Config` (`d_model`,
`n_layers`, `n_heads`, `n_kv_heads`, `head_dim`, `d_ff`, `vocab`); `config.n_params` counts the weights for you
(the embedding, tied to the output head, counted once). Count the cache yourself: grouped-query attention keeps
`n_kv_heads` heads of K and V, not `n_heads`. The lesson's `floor` module and `Config.weight_bytes` /
`Config.kv_bytes_per_position` are off limits (the check makes them raise while your function runs).
The check draws fresh shapes, contexts (1 to 131,072 positions) and bandwidths (a T4's 320 GB/s to an H200's
4.8 TB/s) every run; your number must be within a relative 1e-6 of the floor.
"""


def _draw_config(rng: random.Random, groups=(1, 2, 4, 8)) -> dict:
    """A Llama-style shape: n_kv_heads KV heads of head_dim, each serving ``group`` query heads (multi-head
    attention, group 1, with as many heads as GPT-2 to Llama 2 7B have)."""
    group = rng.choice(groups)
    kv = rng.choice((1, 2, 4, 8)) if group > 1 else rng.choice((8, 12, 16, 32))
    head_dim = rng.choice((64, 128))
    n_heads = kv * group
    d = n_heads * head_dim
    return dict(d_model=d, n_layers=rng.randint(2, 40), n_heads=n_heads, n_kv_heads=kv,
                d_ff=256 * rng.randint(max(1, d // 128), max(2, d // 64)),
                vocab=rng.choice((32000, 32768, 50257, 128256, 151936, rng.randint(1000, 200000))))


def draws(params: dict, seed: int) -> list:
    """The (Config fields, bandwidth in bytes/s, context) triples of one case, from ``seed``."""
    rng = random.Random(seed)
    family, out = params["family"], []
    small = dict(d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8, d_ff=8192, vocab=128256)  # Config.small()
    if family == "lesson":  # the lesson's own numbers: one shape, the same every run
        return [(small, 3.0e12, 512)]
    for _ in range(N_DRAWS):
        bw = rng.uniform(3.2e11, 4.8e12)
        if family == "small":
            out.append((small, bw, rng.randint(1, 131072)))
        elif family == "gqa":
            out.append((_draw_config(rng, groups=(4, 8)), bw, rng.randint(512, 32768)))
        elif family == "mha":
            out.append((_draw_config(rng, groups=(1,)), bw, rng.randint(1, 32768)))
        elif family == "long":
            out.append((_draw_config(rng), bw, rng.randint(32768, 131072)))
        elif family == "any":
            out.append((_draw_config(rng), bw, rng.randint(1, 131072)))
        else:
            raise ValueError(f"unknown family {family!r}")
    return out


def _slips(cfg, bw: float, context: int) -> list:
    """(what a known slip gives, what to say) for one shape: the floor computed with the slip."""
    weights = cfg.n_params * ELEMENT
    per_head = 2 * cfg.n_layers * cfg.head_dim * context * ELEMENT  # K and V of one head over all layers
    kv = per_head * cfg.n_kv_heads
    total = weights + kv
    return [
        (bw / weights, "that is the weights alone: each token also reads the KV cache, K and V of every earlier "
                       "position in every layer (2 x n_layers x n_kv_heads x head_dim x context elements)"),
        (bw / (weights + per_head * cfg.n_heads), "that counts n_heads heads in the KV cache: with grouped-query "
                                                  "attention it holds n_kv_heads heads of K and V"),
        (bw / (8 * total), "8x too low: bits in place of bytes (a bf16 element is 2 bytes, 16 bits)"),
        (8 * bw / total, "8x too high: the bandwidth is in bytes per second already; bits and bytes mixed"),
        (bw / (weights + kv / 2), "that counts K or V, not both: the cache holds K and V, two tensors per layer"),
        (bw / (weights + kv / cfg.n_layers), "that counts one layer's cache: every layer keeps its own K and V"),
        (bw / (2 * total), "2x too low: 4 bytes per element; weights and cache are bf16, 2 bytes each"),
        (2 * bw / total, "2x too high: 1 byte per element; weights and cache are bf16, 2 bytes each"),
        (total / bw, "that is seconds per token (bytes / bandwidth): the floor in tokens per second is its inverse"),
        (bw / (weights + kv * (context + 1) / context), "that reads context + 1 positions of cache: context is "
                                                        "the number of positions read"),
        (bw / (total + cfg.vocab * cfg.d_model * ELEMENT), "that reads the embedding twice: the output head is "
                                                            "tied to it, one matrix, and n_params counts it once"),
    ]


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def compare_answer(cfg, bw: float, context: int, want: float, got) -> list:
    """Problems with one answer, naming the shape (and the slip, where the number is a known slip's)."""
    where = (f"d_model={cfg.d_model}, n_layers={cfg.n_layers}, n_heads={cfg.n_heads}, n_kv_heads={cfg.n_kv_heads}, "
             f"head_dim={cfg.head_dim}, vocab={cfg.vocab}, context={context}, bandwidth={bw:.4g} B/s")
    g = _number(got)
    if g is None or not math.isfinite(g):
        return [f"{where}: returned {got!r:.40}, expected a number of tokens per second"]
    if abs(g - want) <= RTOL * abs(want):
        return []
    problem = f"{where}: expected {want:,.6g} tokens/s, got {g:,.6g} ({g / want:.4g}x the floor)"
    for value, say in _slips(cfg, bw, context):
        if abs(value - want) > RTOL * abs(want) and abs(g - value) <= RTOL * abs(value):
            return [f"{problem}; {say}"]
    return [problem]


def judge(fn, params: dict, seed: int) -> list:
    """The learner's ``fn`` on fresh shapes; expected answers computed before ``fn`` is called."""
    shapes = [(model.Config(**fields, max_seq=max(context, 1024)), bw, context)
              for fields, bw, context in draws(params, seed)]
    expected = [floor.tokens_per_second_floor(cfg, bw, context) for cfg, bw, context in shapes]
    problems = []
    for (cfg, bw, context), want in zip(shapes, expected):
        with trapped(floor.tokens_per_second_floor, floor.bytes_per_token, model.Config.weight_bytes,
                     model.Config.kv_bytes_per_position):  # the course's own arithmetic is off limits
            got = fn(cfg, bw, context)
        problems += compare_answer(cfg, bw, context, want, got)
        if len(problems) >= 3:
            break
    return problems


EXERCISE = JudgedExercise(
    id="tokens_per_second_floor",
    function="tokens_per_second_floor",
    signature="tokens_per_second_floor(config: Config, bandwidth_bytes_per_s: float, context: int) -> float",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("Config.small() at context 512 and 3.0 TB/s (the lesson's floor)", {"family": "lesson"}),
        Case("Config.small() at contexts up to 131,072, T4 to H200 bandwidths", {"family": "small"}),
        Case("grouped-query attention: 4 or 8 query heads per KV head", {"family": "gqa"}),
        Case("multi-head attention: n_kv_heads = n_heads", {"family": "mha"}),
        Case("long contexts (32,768 to 131,072): the KV cache outweighs much of the model", {"family": "long"}),
        Case("any shape, context and bandwidth", {"family": "any"}),
    ),
    judge=judge,
)
