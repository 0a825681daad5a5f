"""The notebook's transformer, and its memory: measured (the allocator on a GPU, a tensor tracker anywhere) and
predicted from the config (parameters, gradients, AdamW's two states, the activations autograd keeps).

A config is a plain dict: ``d`` (model width), ``layers``, ``heads``, ``batch``, ``seq``, ``precision`` ("fp32",
"bf16": bf16 autocast over fp32 weights, or "fp16": fp16 autocast with a GradScaler, what a GPU without bf16 tensor
cores (a T4) runs instead of bf16: :func:`mixed_precision`) and ``checkpoint`` ("none", "block": every block
recomputed in backward, "mlp": only each block's MLP half recomputed). The input is a float batch (B, S, d) and the loss a mean squared error
against a float target, so no vocabulary hides the blocks' own memory.
"""
from __future__ import annotations

import contextlib
import time
import weakref

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import nn
from torch.utils.checkpoint import checkpoint as _checkpoint
from torch.utils._python_dispatch import TorchDispatchMode

from gpucourse import dtypes

PRECISIONS = ("fp32", "bf16", "fp16")
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
CHECKPOINTS = ("none", "block", "mlp")
# The model the lesson measures on a GPU: 8 blocks of width 1024, about 100 M parameters, batch 8 x 1024 tokens.
GPU_CONFIG = dict(d=1024, layers=8, heads=16, batch=8, seq=1024, precision="fp32", checkpoint="none")
CPU_CONFIG = dict(d=128, layers=4, heads=4, batch=4, seq=128, precision="fp32", checkpoint="none")


def config(base: dict | None = None, **changes) -> dict:
    """A full config: ``base`` (default: the GPU or CPU size for this machine) with ``changes``; checked."""
    from gpucourse import device

    cfg = dict(base or (GPU_CONFIG if device.on_gpu() else CPU_CONFIG))
    cfg.update(changes)
    if cfg["precision"] not in PRECISIONS or cfg["checkpoint"] not in CHECKPOINTS:
        raise ValueError(f"precision in {PRECISIONS}, checkpoint in {CHECKPOINTS}; got {cfg}")
    if cfg["d"] % cfg["heads"]:
        raise ValueError(f"d={cfg['d']} must be a multiple of heads={cfg['heads']}")
    return cfg


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(LN(x)), then h + MLP(LN(h)) with a 4d GELU hidden layer."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attention(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, s, d))

    def mlp(self, h):
        return self.fc2(F.gelu(self.fc1(self.ln2(h))))

    def whole(self, x):
        h = x + self.attention(x)
        return h + self.mlp(h)

    def forward(self, x, checkpoint: str = "none"):
        if checkpoint == "block":
            return _checkpoint(self.whole, x, use_reentrant=False)
        h = x + self.attention(x)
        if checkpoint == "mlp":
            return h + _checkpoint(self.mlp, h, use_reentrant=False)
        return h + self.mlp(h)


class Model(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg["d"], cfg["heads"]) for _ in range(cfg["layers"]))
        self.ln_f = nn.LayerNorm(cfg["d"])

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x, self.cfg["checkpoint"])
        return self.ln_f(x)


low_dtype = dtypes.tensor_core_16bit  # bf16, or fp16 on a T4 (saying so): what the mixed-precision runs autocast to


def mixed_precision(props=None, say: bool = True) -> str:
    """The ``precision`` of the lesson's mixed-precision runs: "bf16", or "fp16" (autocast with a GradScaler) where
    :func:`low_dtype` falls back to float16."""
    return low_dtype(props, say).short


def make(cfg: dict, dev=None, seed: int = 0):
    """(model, AdamW(fused), batch x, target y) for ``cfg`` on ``dev`` (default: the course's device). For
    ``precision="fp16"`` the model carries a ``GradScaler`` (``model.scaler``, None otherwise) that :func:`backward`
    and :func:`step` use: fp16's range would flush small gradients to zero without loss scaling."""
    from gpucourse import device

    dev = torch.device(dev) if dev is not None else device.torch_device()
    torch.manual_seed(seed)
    model = Model(cfg).to(dev)
    model.scaler = torch.amp.GradScaler(dev.type) if cfg["precision"] == "fp16" else None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator().manual_seed(seed + 1)
    shape = (cfg["batch"], cfg["seq"], cfg["d"])
    x, y = torch.randn(shape, generator=gen).to(dev), torch.randn(shape, generator=gen).to(dev)
    return model, opt, x, y


def autocast(cfg: dict, dev):
    """bf16 (fp16) autocast for ``precision="bf16"`` (``"fp16"``), nothing for fp32."""
    if cfg["precision"] in _AUTOCAST:
        return torch.autocast(torch.device(dev).type, dtype=_AUTOCAST[cfg["precision"]])
    return contextlib.nullcontext()


def loss_of(model, x, y):
    """Mean squared error, written out: ``pow`` keeps the difference (B, S, d) in float32 for backward."""
    with autocast(model.cfg, x.device):
        return ((model(x) - y) ** 2).mean()


def _scaler(model):
    """The GradScaler :func:`make` gave the model (None unless fp16); a DDP wrapper's is its module's."""
    return getattr(getattr(model, "module", model), "scaler", None)


def backward(model, loss) -> None:
    """``loss.backward()``; with the model's GradScaler (fp16), of the loss scaled up first."""
    scaler = _scaler(model)
    (loss if scaler is None else scaler.scale(loss)).backward()


def step(model, opt) -> None:
    """``opt.step()`` then zero the gradients; with the model's GradScaler (fp16) the scaler steps (it unscales the
    gradients, skips the step if one is inf or NaN) and updates its scale."""
    scaler = _scaler(model)
    if scaler is None:
        opt.step()
    else:
        scaler.step(opt)
        scaler.update()
    opt.zero_grad(set_to_none=True)


def train_step(model, opt, x, y):
    loss = loss_of(model, x, y)
    backward(model, loss)
    step(model, opt)
    return loss


# --- measuring -------------------------------------------------------------------------------------------------------


class LiveTensors(TorchDispatchMode):
    """Tracks every storage that a torch operation creates while the mode is on, for as long as it lives, and logs
    the bytes alive after each operation (``timeline``: (op name, live bytes)). The CPU has no allocator statistics;
    this counts the same thing the GPU allocator's ``memory_allocated`` counts (tensor storages), without its
    rounding to 512-byte blocks."""

    def __init__(self):
        super().__init__()
        self.live = {}  # id of storage -> bytes
        self.timeline = []
        self.peak = 0
        self._bytes = 0

    def _gone(self, key):
        self._bytes -= self.live.pop(key, 0)

    def _track(self, t, inputs):
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        s = t.untyped_storage()
        key = id(s)
        if key in self.live or s.data_ptr() in inputs:  # a view of an input (e.g. a weight's transpose): no memory
            return
        self.live[key] = s.nbytes()
        self._bytes += s.nbytes()
        weakref.finalize(s, self._gone, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {a.untyped_storage().data_ptr() for a in pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor) and a.device.type != "meta"}
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            self._track(t, inputs)
        self.peak = max(self.peak, self._bytes)
        self.timeline.append((func.__name__, self._bytes))
        return out

    @property
    def alive(self) -> int:
        return self._bytes


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measure_budget(cfg: dict, dev=None, seed: int = 0, peak: bool = True) -> dict:
    """What one training step of ``cfg`` holds, measured on ``dev`` (default: the course's device): bytes of the
    parameters, of the gradients (after backward), of AdamW's state (after a step) and of the activations (tensors
    created by the forward pass and still alive when it ends: what autograd keeps for backward). On a GPU the
    activations come from the allocator (``memory_allocated`` after the forward minus before) and ``peak`` is
    ``max_memory_allocated`` over a whole step (the second one: AdamW's state exists by then); on the CPU the
    activations come from :class:`LiveTensors`, and ``peak`` is its peak over a step (forward, backward, step).
    ``peak=False``: only the four figures (on the CPU, tracking the forward pass alone is much faster)."""
    from gpucourse import device

    dev = torch.device(dev) if dev is not None else device.torch_device()
    if dev.type == "cuda":
        import gc

        gc.collect()
        torch.cuda.synchronize(dev)
        already = torch.cuda.memory_allocated(dev)  # whatever else the process holds on the GPU: not this step's
    model, opt, x, y = make(cfg, dev, seed)
    params = _nbytes(model.parameters())
    loss = loss_of(model, x, y)
    backward(model, loss)
    grads = _nbytes(p.grad for p in model.parameters())
    step(model, opt)
    state = _nbytes(t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor))
    del loss
    out = {"parameters": params, "gradients": grads, "optimizer": state}
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        before = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        loss = loss_of(model, x, y)
        torch.cuda.synchronize(dev)
        out["activations"] = torch.cuda.memory_allocated(dev) - before
        backward(model, loss)
        step(model, opt)
        del loss
        torch.cuda.synchronize(dev)
        out["peak"] = torch.cuda.max_memory_allocated(dev) - already
        out["peak_measured_by"] = "torch.cuda.max_memory_allocated"
    else:
        static = params + state + _nbytes([x, y])
        with LiveTensors() as live:
            loss = loss_of(model, x, y)
            out["activations"] = live.alive
            if not peak:
                return out
            backward(model, loss)
            step(model, opt)
            del loss
        out["peak"] = static + live.peak
        out["peak_measured_by"] = "tracked tensors (LiveTensors) + parameters, AdamW state and the batch"
    return out


def memory_timeline(cfg: dict, seed: int = 0) -> dict:
    """Bytes allocated over one training step (the second), for the picture: on a GPU from the caching allocator's
    own history (``torch.cuda.memory._record_memory_history``: every alloc and free, in order), on the CPU from
    :class:`LiveTensors`. Returns {"bytes": [...], "marks": {"forward ends": i, "backward ends": j}, "source": ...}."""
    from gpucourse import device

    dev = device.torch_device()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        already = torch.cuda.memory_allocated()
    model, opt, x, y = make(cfg, dev, seed)
    train_step(model, opt, x, y)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated() - already
        torch.cuda.memory._record_memory_history(stacks="python", max_entries=1_000_000)
        try:
            loss = loss_of(model, x, y)
            torch.cuda.synchronize()
            snap_fwd = len(torch.cuda.memory._snapshot()["device_traces"][dev.index or 0])
            backward(model, loss)
            torch.cuda.synchronize()
            snap_bwd = len(torch.cuda.memory._snapshot()["device_traces"][dev.index or 0])
            step(model, opt)
            del loss
            torch.cuda.synchronize()
            trace = torch.cuda.memory._snapshot()["device_traces"][dev.index or 0]
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
        level, series, fwd_i, bwd_i = base, [], None, None
        for i, ev in enumerate(trace):
            if ev["action"] == "alloc":
                level += ev["size"]
            elif ev["action"] == "free_completed":
                level -= ev["size"]
            else:
                continue
            series.append(level)
            if fwd_i is None and i >= snap_fwd - 1:
                fwd_i = len(series) - 1
            if bwd_i is None and i >= snap_bwd - 1:
                bwd_i = len(series) - 1
        return {"bytes": series, "marks": {"forward ends": fwd_i, "backward ends": bwd_i},
                "source": "the CUDA caching allocator's history (alloc and free events)"}
    static = _nbytes(model.parameters()) + _nbytes(t for s in opt.state.values() for t in s.values()) + \
        _nbytes([x, y])
    with LiveTensors() as live:
        loss = loss_of(model, x, y)
        fwd = len(live.timeline) - 1
        backward(model, loss)
        bwd = len(live.timeline) - 1
        step(model, opt)
        del loss
    return {"bytes": [static + b for _, b in live.timeline], "marks": {"forward ends": fwd, "backward ends": bwd},
            "source": "tensors tracked op by op (LiveTensors), plus parameters, AdamW state and the batch"}


def step_ms(cfg: dict, reps: int = 10) -> float:
    """Median milliseconds of one training step (forward, backward, AdamW) on the GPU, timed with CUDA events."""
    from gpucourse import timing

    model, opt, x, y = make(cfg)
    times = timing.event_times(lambda: train_step(model, opt, x, y), reps=reps, warmup=3)
    return sorted(times)[len(times) // 2]


def grad_accumulation(cfg: dict, micro: int, seed: int = 0) -> dict:
    """Gradients of one batch of ``cfg["batch"]`` against ``micro`` micro-batches, each loss divided by ``micro``,
    backward after each (gradients add up in ``.grad``). In float64 both give the same sum up to rounding; in
    float32 the two orders of summation differ by a few ulps. Returns the worst relative difference over the
    parameters (norm of the difference over norm of the gradient)."""
    from gpucourse import device

    dev = device.torch_device()
    out = {}
    for dtype in (torch.float32, torch.float64):
        model, _, x, y = make(cfg, dev, seed)
        model = model.to(dtype)
        x, y = x.to(dtype), y.to(dtype)
        loss_of(model, x, y).backward()
        whole = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
            (loss_of(model, xs, ys) / micro).backward()
        worst = max(float((p.grad - g).norm() / g.norm()) for p, g in zip(model.parameters(), whole))
        out[str(dtype).replace("torch.", "")] = worst
    return out


def time_host(fn, reps: int = 3) -> float:
    """Median ms of ``fn()`` on the host clock (CPU mode: shown, never claimed)."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]
