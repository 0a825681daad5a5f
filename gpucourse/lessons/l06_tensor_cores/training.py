"""Mixed precision in training: one small decoder-only transformer, built here, trained in fp32, TF32, bf16 autocast
and fp16 autocast with a GradScaler; step time, peak memory and the loss curve of each.

What runs in which precision: under ``torch.autocast`` matmuls (linear layers, attention) run in the low dtype on
the tensor cores, while reductions that need range (softmax inside the loss, layer norm) stay in fp32; the weights,
their gradients and AdamW's two moments stay fp32 (the optimizer updates the fp32 master weights). fp16's narrow
range needs the loss scaled up before backward so small gradients do not flush to zero (``GradScaler``); bf16 has
fp32's exponent range and needs no scaling. TF32 is not autocast: it is a global switch that lets fp32 matmuls run
on the tensor cores with inputs rounded to 10 mantissa bits.

The data is synthetic and learnable: a fixed random permutation of the vocabulary is walked from a random start
(token i of a sequence is ``perm[(start + i) % vocab]``), with 10 % of tokens replaced by random ones, so the next
token follows from the current one 90 % of the time (see :func:`loss_floor`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .precision import tf32

STEPS_GPU = 60  # training steps per run on a GPU (the tiny CPU-mode model takes fewer in the lesson)
TIMED_BATCHES = 4  # batches the timed steps cycle through (built before timing, like the training batches)
MODES = ("fp32", "tf32", "bf16 autocast", "fp16 autocast + GradScaler")


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 8192
    d_model: int = 1024
    n_layers: int = 8
    n_heads: int = 16
    seq: int = 1024
    batch: int = 8
    lr: float = 1e-3

    @staticmethod
    def for_mode() -> "Config":
        """The lesson's model on a GPU (about 110 M parameters), a tiny one in CPU mode."""
        from gpucourse import device

        return Config() if device.on_gpu() else Config(vocab=128, d_model=32, n_layers=1, n_heads=2, seq=32,
                                                       batch=4, lr=3e-3)


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.n_heads = c.n_heads
        self.ln1, self.ln2 = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model, bias=False)  # q, k and v in one GEMM
        self.proj = nn.Linear(c.d_model, c.d_model, bias=False)
        self.up = nn.Linear(c.d_model, 4 * c.d_model, bias=False)
        self.down = nn.Linear(4 * c.d_model, c.d_model, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.emb = nn.Embedding(c.vocab, c.d_model)
        self.pos = nn.Parameter(torch.zeros(c.seq, c.d_model))
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.ln = nn.LayerNorm(c.d_model)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.emb.weight.t()  # output layer tied to the embedding


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def batch(c: Config, gen: torch.Generator, dev) -> tuple:
    """(inputs, targets) of shape (batch, seq): counting sequences with 10 % noise (see the module docstring)."""
    perm = torch.randperm(c.vocab, generator=torch.Generator().manual_seed(1234))  # the same walk for every run
    start = torch.randint(c.vocab, (c.batch, 1), generator=gen)
    seq = perm[(start + torch.arange(c.seq + 1)) % c.vocab]
    noise = torch.rand(seq.shape, generator=gen) < 0.1
    seq = torch.where(noise, torch.randint(c.vocab, seq.shape, generator=gen), seq)
    seq = seq.to(dev)
    return seq[:, :-1], seq[:, 1:]


def autocast(mode: str, dev):
    """The forward pass's context: autocast to bf16 or fp16 for those modes, nothing otherwise. The backward runs
    outside it, in the dtypes autocast chose for the forward (as PyTorch recommends)."""
    if mode.startswith(("bf16", "fp16")):
        dtype = torch.bfloat16 if mode.startswith("bf16") else torch.float16
        return torch.autocast(device_type=torch.device(dev).type, dtype=dtype)
    return contextlib.nullcontext()


def train(mode: str, steps: int = 30, seed: int = 0, c: Config | None = None, timed_steps: int = 10) -> dict:
    """Train a fresh model (weights from ``seed``) for ``steps`` steps in ``mode`` and return the loss of every step;
    on a GPU also time ``timed_steps`` more steps with :func:`gpucourse.timing.bench` (median ms per step) and report
    the peak memory of the whole run.

    Every batch is built and copied to the device before the first step (the data of a seed is the same in every
    mode): a step then runs only the model and the optimizer, with no host-side batch synthesis and no synchronous
    pageable copy inside it (lesson 02's anti-pattern, which would add the same host time to every mode and shrink
    their ratios). The timed steps cycle through :data:`TIMED_BATCHES` further batches built the same way."""
    import itertools

    from gpucourse import device
    from gpucourse.timing import bench

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    c = c or Config.for_mode()
    dev = device.torch_device()
    if mode == "tf32" and dev.type == "cuda" and not device.has_tf32():
        raise RuntimeError("TF32 needs an Ampere or newer GPU (compute capability 8.0+)")
    if mode.startswith("bf16") and dev.type == "cuda" and not device.has_bf16():
        raise RuntimeError("bf16 autocast needs bf16 tensor cores (Ampere or newer, compute capability 8.0+)")
    torch.manual_seed(seed)
    model = TinyGPT(c).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, fused=dev.type == "cuda")
    scaler = torch.amp.GradScaler(dev.type, enabled=mode.startswith("fp16"))
    gen = torch.Generator().manual_seed(seed + 1)
    data = [batch(c, gen, dev) for _ in range(steps)]  # on the device before any step runs
    timed_data = itertools.cycle([batch(c, gen, dev) for _ in range(TIMED_BATCHES if timed_steps else 0)])
    losses = []  # tensors, read after the run: no synchronization per step

    def step(x, y):
        with tf32(mode == "tf32"):  # the whole step: the backward's matmuls need it too
            with autocast(mode, dev):
                logits = model(x)
                loss = F.cross_entropy(logits.float().view(-1, c.vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()  # fp16: the loss scaled up so small gradients stay representable
            scaler.step(opt)  # unscales the gradients first; skips the step if any is inf/NaN
            scaler.update()
        losses.append(loss.detach())

    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    for x, y in data:
        step(x, y)
    out = {"mode": mode, "seed": seed, "params": n_params(model), "config": dataclasses.asdict(c)}
    curve = [float(v) for v in torch.stack(losses).cpu()]
    out["losses"] = curve
    out["final_loss"] = sum(curve[-5:]) / len(curve[-5:])
    if dev.type == "cuda" and timed_steps:
        r = bench(lambda: step(*next(timed_data)), warmup_ms=0, rep_ms=0, min_reps=timed_steps,
                  max_reps=timed_steps, flush_l2=False)
        out["step_ms"] = r.median_ms
        out["peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return out


def matmul_rates(c: Config | None = None, rounds: int = 5, rep_ms: float = 100) -> dict:
    """TFLOP/s of the model's largest matmul shape (the MLP's up-projection: batch x seq tokens by d_model, times
    d_model by 4 d_model) in TF32 and in bf16, timed in the same interleaved rounds: what the tensor cores alone gain
    from bf16 over TF32 at this model's sizes. GPU only; needs TF32 and bf16 (Ampere or newer)."""
    from gpucourse import device
    from gpucourse.timing import interleaved, settle

    device.require_gpu("Timing the model's matmuls")
    if not (device.has_tf32() and device.has_bf16()):
        raise RuntimeError("comparing bf16 with TF32 needs an Ampere or newer GPU (compute capability 8.0+)")
    c = c or Config.for_mode()
    m, k, n = c.batch * c.seq, c.d_model, 4 * c.d_model
    x, w = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    xb, wb = x.bfloat16(), w.bfloat16()

    def tf32_mm():
        with tf32(True):
            return x @ w

    settle(lambda: xb @ wb, seconds=0.5)
    runs = interleaved({"tf32": tf32_mm, "bf16": lambda: xb @ wb}, rounds=rounds, rep_ms=rep_ms)
    tfl = {name: 2 * m * n * k / r.median_ms / 1e9 for name, r in runs.items()}
    return {"shape": [m, k, n], "tflops": tfl, "bf16_over_tf32": runs["tf32"].median_ms / runs["bf16"].median_ms}


def compare(steps: int = 30, fp32_seeds=(0, 1, 2), modes=MODES, c: Config | None = None) -> dict:
    """Every mode of ``modes`` this device runs (seed 0), plus fp32 at the other ``fp32_seeds`` for the run-to-run
    spread of the final loss; on a GPU with TF32 and bf16 also :func:`matmul_rates` (what bf16 gains over TF32 in the
    matmuls alone, the yardstick for the step's gain). Returns ``{"runs": {mode: train(...)}, "fp32_finals": [...],
    "skipped": {mode: why}, "matmul": matmul_rates(...) or None}``."""
    from gpucourse import device

    runs, skipped = {}, {}
    for mode in modes:
        if device.on_gpu() and ((mode == "tf32" and not device.has_tf32()) or
                                (mode.startswith("bf16") and not device.has_bf16())):
            skipped[mode] = "needs an Ampere or newer GPU"
            continue
        if not device.on_gpu() and mode in ("tf32", "fp16 autocast + GradScaler"):
            skipped[mode] = "GPU only (TF32 and fp16 tensor cores)"
            continue
        runs[mode] = train(mode, steps=steps, seed=0, c=c)
    finals = [runs["fp32"]["final_loss"]] if "fp32" in runs else []
    for s in fp32_seeds[1:]:
        finals.append(train("fp32", steps=steps, seed=s, c=c, timed_steps=0)["final_loss"])
    matmul = matmul_rates(c) if device.on_gpu() and device.has_tf32() and device.has_bf16() else None
    return {"runs": runs, "fp32_finals": finals, "skipped": skipped, "matmul": matmul}


def summary(result: dict) -> str:
    runs, finals = result["runs"], result["fp32_finals"]
    lines = [f"{'mode':<28}{'step (ms)':>10}{'vs fp32':>9}{'peak GB':>9}{'final loss':>12}"]
    base = runs.get("fp32", {}).get("step_ms")
    for mode, r in runs.items():
        ms = r.get("step_ms")
        lines.append(f"{mode:<28}{(f'{ms:.1f}' if ms else '-'):>10}"
                     f"{(f'{base / ms:.2f}x' if ms and base else '-'):>9}"
                     f"{(format(r['peak_gb'], '.2f') if 'peak_gb' in r else '-'):>9}{r['final_loss']:>12.4f}")
    for mode, why in result.get("skipped", {}).items():
        lines.append(f"{mode:<28} skipped: {why}")
    if len(finals) > 1:
        lines.append(f"fp32 final loss over seeds {len(finals)} runs: {min(finals):.4f} .. {max(finals):.4f} "
                     f"(spread {max(finals) - min(finals):.4f})")
    return "\n".join(lines)


def loss_floor(c: Config) -> float:
    """Cross-entropy of a perfect predictor on this data: 90 % the counted token, 10 % uniform noise."""
    p_right = 0.9 + 0.1 / c.vocab
    p_other = 0.1 / c.vocab
    return -(p_right * math.log(p_right) + (c.vocab - 1) * p_other * math.log(p_other))


def accuracy_report(result: dict) -> str:
    """What the final losses of :func:`compare` show: each mode's final loss (mean of its last 5 steps) and its
    difference from fp32 at the same seed and data, fp32's spread over seeds, the loss the runs started from and the
    data's floor (:func:`loss_floor`), so that "the modes agree" is a statement about printed numbers."""
    runs, finals = result["runs"], result["fp32_finals"]
    if not runs:
        return "no runs"
    first = next(iter(runs.values()))
    c = Config(**first["config"])
    base = runs.get("fp32")
    lines = [f"loss at the first step {first['losses'][0]:.2f}; the data's floor (a perfect predictor) "
             f"{loss_floor(c):.2f}; final loss = mean of the last 5 of {len(first['losses'])} steps:"]
    diffs = {}
    for mode, r in runs.items():
        line = f"  {mode:<28}{r['final_loss']:8.3f}"
        if base is not None and mode != "fp32":
            diffs[mode] = r["final_loss"] - base["final_loss"]
            line += f"   {diffs[mode]:+.3f} against fp32 (same seed and data)"
        lines.append(line)
    if len(finals) > 1:
        spread = max(finals) - min(finals)
        lines.append(f"fp32 over {len(finals)} seeds: {min(finals):.3f} .. {max(finals):.3f} (spread {spread:.3f})")
        if diffs and spread > 0:
            worst = max(diffs, key=lambda m: abs(diffs[m]))
            lines.append(f"largest difference from fp32: {worst}, {abs(diffs[worst]):.3f} = "
                         f"{abs(diffs[worst]) / spread:.2f} of the fp32 seed spread")
    return "\n".join(lines)
