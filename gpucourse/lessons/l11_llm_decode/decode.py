"""Greedy decoding of ``n_new`` tokens after a prompt, one function per step of the lesson's ladder. Each returns a
:class:`Run`: the tokens (B, n_new) and the seconds the decoding steps took.

The prompt is run in one forward pass (the prefill), which gives the first new token; the ``n_new - 1`` steps after
it are the decode loop that is timed (synchronized before and after, the median of ``runs`` runs after ``warmup``
untimed ones). Tokens stay on the device between steps (the argmax feeds the next step directly): the loop never
waits for the GPU, as a real server's does not.

The ladder:

* :func:`eager_dynamic`: the growing cache (``torch.cat`` per step), every op launched from Python.
* :func:`eager_static`: the preallocated cache written at a position held in a tensor; still launched op by op.
* :func:`graphs`: the static-cache step captured once in a ``torch.cuda.CUDAGraph`` and replayed: one launch per
  token instead of hundreds. GPU only (CPU mode: a skipped :class:`Run` that says so).
* :func:`compiled`: the static-cache step under ``torch.compile`` (fused kernels). Modes without CUDA graphs
  (``"default"``, ``"max-autotune-no-cudagraphs"``) are captured by hand into a CUDA graph as :func:`graphs` does;
  ``"reduce-overhead"`` lets torch.compile make the graphs, with the step's output copied out before the next
  replay overwrites it (keeping a reference to it is what raises "accessing tensor output of CUDAGraphs that has
  been overwritten").

The ladder's last step, each layer in six Triton kernels of the lesson's own, is :mod:`.fused_layer`'s
``triton_layer``.

``attention="split_kv"`` runs each decode step's attention through the split-KV Triton kernel
(:mod:`.decode_attention`) instead of SDPA.
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import torch

from .model import Config, DynamicCache, StaticCache, forward_dynamic, forward_static

CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that make CUDA graphs themselves


@dataclasses.dataclass
class Run:
    """One ladder step's result. ``tokens``: (B, n_new) int64 on the CPU (None when skipped); ``seconds``: median
    wall time of the ``steps`` timed decode steps (after the prefill); ``skipped``: why the step did not run."""

    name: str
    tokens: torch.Tensor | None
    seconds: float
    steps: int
    batch: int = 1
    skipped: str = ""
    all_seconds: list = dataclasses.field(default_factory=list)
    margins: torch.Tensor | None = None  # (B, n_new) float32: top-1 minus top-2 logit at each step (reference runs)

    @property
    def tokens_per_s(self) -> float:
        """Tokens generated per second by the decode loop (steps x batch / seconds)."""
        if self.skipped or not self.seconds:
            return float("nan")
        return self.steps * self.batch / self.seconds

    def to_dict(self) -> dict:
        return {"name": self.name, "tokens": None if self.tokens is None else self.tokens.tolist(),
                "margins": None if self.margins is None else self.margins.tolist(), "seconds": self.seconds, "steps": self.steps, "batch": self.batch, "tokens_per_s": self.tokens_per_s,
                "skipped": self.skipped, "all_seconds": list(self.all_seconds)}


def make_prompt(config: Config, length: int, batch: int = 1, device="cpu", seed: int = 1):
    """Random prompt tokens (batch, length), int64, the same for a seed on one device."""
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(seed)
    return torch.randint(0, config.vocab, (batch, length), generator=g, device=device)


def first_divergence(a, b):
    """The first (row, position) where token tensors ``a`` and ``b`` differ, or None where they are equal."""
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.shape != b.shape:
        raise ValueError(f"token tensors of different shapes: {tuple(a.shape)} and {tuple(b.shape)}")
    diff = (a != b).nonzero()
    if diff.numel() == 0:
        return None
    first = diff[diff[:, 1].argmin()] if diff.dim() == 2 else diff[0]
    return tuple(int(x) for x in first)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _check(config: Config, prompt, n_new: int, static: bool):
    if prompt.dim() != 2 or prompt.dtype != torch.int64:
        raise ValueError(f"prompt must be (batch, length) int64 tokens; got {prompt.dtype} of shape "
                         f"{tuple(prompt.shape)}")
    if n_new < 1:
        raise ValueError(f"n_new must be >= 1, got {n_new}")
    if prompt.shape[1] + n_new > config.max_seq:
        where = "the static cache holds" if static else "the RoPE table holds"
        raise ValueError(f"prompt ({prompt.shape[1]}) + n_new ({n_new}) positions exceed config.max_seq "
                         f"({config.max_seq}) that {where}")


def _timed(name: str, once, runs: int, warmup: int, batch: int, n_new: int) -> Run:
    """Run ``once() -> (tokens, seconds)`` ``warmup`` times untimed and ``runs`` times timed."""
    for _ in range(warmup):
        once()
    secs, tokens = [], None
    for _ in range(max(1, runs)):
        tokens, s = once()
        secs.append(s)
    return Run(name, tokens.cpu(), statistics.median(secs), n_new - 1, batch, all_seconds=secs)


def _margin(logits):
    """Top-1 minus top-2 logit of each row, float32: how far the argmax is from changing."""
    top = logits.float().topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


@torch.inference_mode()
def eager_dynamic(weights: dict, config: Config, prompt, n_new: int, runs: int = 1, warmup: int = 0,
                  margins: bool = False) -> Run:
    """Greedy decoding with the growing cache, every op launched eagerly: the baseline. ``margins=True``: one
    further untimed run records each step's top-1 minus top-2 logit (``Run.margins``), the reference a faster step's
    first differing token is judged against (:func:`near_tie`)."""
    _check(config, prompt, n_new, static=False)
    device, B = prompt.device, prompt.shape[0]

    def once(margin=None):
        cache = DynamicCache(config.n_layers)
        out = torch.empty((B, n_new), dtype=torch.int64, device=device)
        logits = forward_dynamic(weights, config, prompt, cache)
        tok = logits.argmax(-1, keepdim=True)
        out[:, :1].copy_(tok)
        if margin is not None:
            margin[:, 0] = _margin(logits)
        _sync(device)
        t0 = time.perf_counter()
        for i in range(1, n_new):
            logits = forward_dynamic(weights, config, tok, cache)
            tok = logits.argmax(-1, keepdim=True)
            out[:, i:i + 1].copy_(tok)
            if margin is not None:
                margin[:, i] = _margin(logits)
        _sync(device)
        return out, time.perf_counter() - t0

    run = _timed("eager_dynamic", once, runs, warmup, B, n_new)
    if margins:
        m = torch.empty((B, n_new), dtype=torch.float32, device=device)
        once(m)
        run.margins = m.cpu()
    return run


@torch.inference_mode()
def path_noise(weights: dict, config: Config, prompt, n_new: int, attention: str = "split_kv") -> dict:
    """How far apart two correct paths' logits lie: the eager loop (growing cache, SDPA) and the static cache with
    ``attention``, both fed the eager loop's own tokens (teacher-forced: the same inputs at every position, so any
    difference is rounding, never a different text). Per generated position: the largest |logit difference|, the eager
    logits' top-1 minus top-2, and whether the two argmaxes differ. Returns {"max_abs", "per_position",
    "margins", "flips" (positions whose argmaxes differ)}; :func:`tie_tolerance` turns it into the near-tie bound."""
    _check(config, prompt, n_new, static=True)
    device, B = prompt.device, prompt.shape[0]
    dyn = DynamicCache(config.n_layers)
    st = StaticCache.empty(config, B, device, weights["embed"].dtype)
    a = forward_dynamic(weights, config, prompt, dyn)
    b = forward_static(weights, config, prompt, torch.arange(prompt.shape[1], device=device), st)
    diffs, margins, flips = [], [], []
    for i in range(n_new):
        diffs.append(float((a.float() - b.float()).abs().max()))
        margins.append(float(_margin(a).min()))
        tok = a.argmax(-1, keepdim=True)
        if bool((tok != b.argmax(-1, keepdim=True)).any()):
            flips.append(i)
        if i + 1 < n_new:
            pos = torch.tensor([prompt.shape[1] + i], device=device)
            a = forward_dynamic(weights, config, tok, dyn)
            b = forward_static(weights, config, tok, pos, st, attention)
    return {"max_abs": max(diffs), "per_position": diffs, "margins": margins, "flips": flips}


def tie_tolerance(noise: dict) -> float:
    """The near-tie bound from :func:`path_noise`: if every logit of a path lies within ``d`` of the eager loop's,
    its argmax can differ only where the eager top two were within ``2 d`` (a winner that drops by d and a runner-up
    that rises by d). So a faster path that rounds no worse than the two measured ones can flip only such a pair."""
    return 2.0 * noise["max_abs"]


def near_tie(reference: Run, tokens, tolerance: float) -> dict:
    """Whether ``tokens`` (B, n_new) agree with ``reference``'s (an :func:`eager_dynamic` run with margins) up to
    a near-tie: equal, or first differing at a step where the reference's top-1 and top-2 logits were within
    ``tolerance`` of each other (0: the tokens must be equal, as in float32; in 16-bit :func:`tie_tolerance`). After
    the first different token the two runs decode different texts, so later steps say nothing.
    Returns {"equal", "first_divergence" (step or None), "margin" (the reference's margin there), "within"}."""
    div = first_divergence(reference.tokens, tokens)
    if div is None:
        return {"equal": True, "first_divergence": None, "margin": None, "within": True}
    row, step = div
    margin = float(reference.margins[row, step]) if reference.margins is not None else float("nan")
    return {"equal": False, "first_divergence": step, "margin": margin, "within": margin <= tolerance}


class _Static:
    """A static cache, the current token and position as tensors, and the step that advances them in place."""

    def __init__(self, weights, config, prompt, attention):
        self.weights, self.config, self.prompt, self.attention = weights, config, prompt, attention
        device, B = prompt.device, prompt.shape[0]
        dtype = weights["embed"].dtype
        self.cache = StaticCache.empty(config, B, device, dtype)
        self.tok = torch.zeros((B, 1), dtype=torch.int64, device=device)
        self.pos = torch.zeros((1,), dtype=torch.int64, device=device)
        self.prompt_positions = torch.arange(prompt.shape[1], device=device)

    def logits(self, tok, pos):
        return forward_static(self.weights, self.config, tok, pos, self.cache, self.attention)

    def step(self):
        """Decode the token at ``pos``: write the next one into ``tok`` and advance ``pos`` (no host sync)."""
        self.tok.copy_(self.logits(self.tok, self.pos).argmax(-1, keepdim=True))
        self.pos.add_(1)

    def prefill(self):
        self.tok.copy_(forward_static(self.weights, self.config, self.prompt, self.prompt_positions, self.cache,
                                      "sdpa").argmax(-1, keepdim=True))
        self.pos.fill_(self.prompt.shape[1])

    def loop(self, name, advance, n_new, runs, warmup) -> Run:
        device, B = self.prompt.device, self.prompt.shape[0]

        def once():
            out = torch.empty((B, n_new), dtype=torch.int64, device=device)
            self.prefill()
            out[:, :1].copy_(self.tok)
            _sync(device)
            t0 = time.perf_counter()
            for i in range(1, n_new):
                advance()
                out[:, i:i + 1].copy_(self.tok)
            _sync(device)
            return out, time.perf_counter() - t0

        return _timed(name, once, runs, warmup, B, n_new)


def _capture(fn, warm: int = 3):
    """``fn`` captured in a CUDA graph (after ``warm`` calls on a side stream, as PyTorch's docs prescribe: they
    compile, autotune and allocate outside the capture); returns the graph's replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


@torch.inference_mode()
def eager_static(weights: dict, config: Config, prompt, n_new: int, runs: int = 1, warmup: int = 0,
                 attention: str = "sdpa") -> Run:
    """Greedy decoding with the preallocated cache, launched op by op."""
    _check(config, prompt, n_new, static=True)
    s = _Static(weights, config, prompt, attention)
    return s.loop("eager_static" + ("" if attention == "sdpa" else f"[{attention}]"), s.step, n_new, runs, warmup)


@torch.inference_mode()
def graphs(weights: dict, config: Config, prompt, n_new: int, runs: int = 1, warmup: int = 0,
           attention: str = "sdpa") -> Run:
    """The static-cache step captured once in a CUDA graph and replayed for every token (GPU only)."""
    name = "graphs" + ("" if attention == "sdpa" else f"[{attention}]")
    if prompt.device.type != "cuda":
        return Run(name, None, float("nan"), 0, prompt.shape[0],
                   skipped="CUDA graphs need a GPU: skipped in CPU mode")
    _check(config, prompt, n_new, static=True)
    s = _Static(weights, config, prompt, attention)
    s.prefill()  # a valid position for the warm-up steps
    return s.loop(name, _capture(s.step), n_new, runs, warmup)


def compiled(weights: dict, config: Config, prompt, n_new: int, runs: int = 1, warmup: int = 1,
             mode: str = "default", attention: str = "sdpa", backend: str = "inductor") -> Run:
    """The static-cache step under ``torch.compile(mode=mode, backend=backend)``; on a GPU also in a CUDA graph:
    captured by hand for modes without graphs, made by torch.compile for :data:`CUDAGRAPH_MODES`. ``warmup`` runs
    (at least one) compile before the timed ones."""
    _check(config, prompt, n_new, static=True)
    name = f"compiled[{mode}]" + ("" if attention == "sdpa" else f"[{attention}]")
    on_gpu = prompt.device.type == "cuda"
    with torch.inference_mode():
        s = _Static(weights, config, prompt, attention)
    if mode in CUDAGRAPH_MODES:
        # torch.compile's CUDA graphs copy every input whose address it may not assume fixed into the graph's own
        # buffer on each replay: the weights (2.5 GB) and the cache must be marked static, as a module's parameters
        # and buffers are.
        for t in _tensors(weights) + [s.cache.k, s.cache.v]:
            torch._dynamo.mark_static_address(t)
        fn = torch.compile(s.logits, mode=mode, backend=backend, fullgraph=True)

        def advance():
            torch.compiler.cudagraph_mark_step_begin()
            logits = fn(s.tok, s.pos)
            s.tok.copy_(logits.argmax(-1, keepdim=True))  # out of the graph's output before the next replay
            s.pos.add_(1)
    else:
        fn = torch.compile(s.step, mode=mode, backend=backend, fullgraph=True)
        advance = fn
    with torch.inference_mode():
        if on_gpu and mode not in CUDAGRAPH_MODES:
            s.prefill()
            fn()  # compile (and autotune) on the default stream, outside any capture
            torch.cuda.synchronize()
            advance = _capture(fn, warm=2)
        return s.loop(name, advance, n_new, runs, max(1, warmup))


def _tensors(weights: dict) -> list:
    out = []
    for v in weights.values():
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, list):
            for lw in v:
                out += list(lw.values())
    return out


LADDER = {"eager_dynamic": eager_dynamic, "eager_static": eager_static, "graphs": graphs, "compiled": compiled}
