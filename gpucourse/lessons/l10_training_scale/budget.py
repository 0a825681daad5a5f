"""The memory budget of a training step, predicted on paper from the config (see model.py for the model and the
config's keys). This is the course's answer to the ``memory_budget`` exercise: its judge compares a learner's
figures with a measurement, never with this file, and refuses a submission that calls it.

Every term counts bytes of tensors, as the allocator's ``memory_allocated`` does. T = batch x seq tokens; the
residual stream stays float32 under bf16 autocast (the blocks add bf16 outputs into it), and layer norm computes in
float32, so under autocast the linear layers keep a bf16 copy of their input and of their weight. fp16 autocast (a T4's
stand-in for bf16) keeps the same 2-byte copies; its GradScaler adds a few bytes.
"""
from __future__ import annotations

FP32 = 4
HALF = ("bf16", "fp16")  # the precisions that autocast to a 2-byte type


def parameter_count(cfg: dict) -> int:
    """Per block: qkv (3d^2 + 3d), output projection (d^2 + d), MLP (4d^2 + 4d and 4d^2 + d), two layer norms
    (4d); plus the final layer norm (2d)."""
    d = cfg["d"]
    return cfg["layers"] * (12 * d * d + 13 * d) + 2 * d


def parameter_tensors(cfg: dict) -> int:
    return cfg["layers"] * 12 + 2


def activations_per_block(cfg: dict) -> dict:
    """Bytes autograd keeps per block, split into the attention half and the MLP half (without checkpointing)."""
    d, t = cfg["d"], cfg["batch"] * cfg["seq"]
    c = 2 if cfg["precision"] in HALF else FP32  # bytes of what the linear layers and attention compute in
    casts = 2 if cfg["precision"] in HALF else 0  # a bf16 (fp16) copy of each weight, kept for the weight's backward
    ln_stats = 2 * t * FP32  # mean and 1/std per token
    lse = cfg["batch"] * cfg["heads"] * cfg["seq"] * FP32  # attention's log-sum-exp per query and head
    attention = (t * d * (FP32 + c + 3 * c + c)  # block input (LN saves it), LN out, q k v, attention out
                 + ln_stats + lse + casts * 4 * d * d)
    mlp = (t * d * (FP32 + c + 4 * c + 4 * c)  # h = x + attn (LN saves it), LN out, fc1 out, GELU out
           + ln_stats + casts * 8 * d * d)
    return {"attention": attention, "mlp": mlp}


def activations(cfg: dict) -> int:
    """Bytes alive when the forward pass ends. Each block keeps its input; checkpointing a block keeps only that
    (the rest is recomputed in backward); checkpointing the MLP keeps the attention half and the MLP's input h.
    The first block's input is the batch, which existed before the step, and the end of the model keeps the last
    block's output (the final layer norm's input), its statistics, and the difference (out - y) that the squared
    error's backward needs."""
    d, t = cfg["d"], cfg["batch"] * cfg["seq"]
    half = activations_per_block(cfg)
    per_block = {"none": half["attention"] + half["mlp"],
                 "mlp": half["attention"] + t * d * FP32,
                 "block": t * d * FP32}[cfg["checkpoint"]]
    return cfg["layers"] * per_block - t * d * FP32 + (2 * t * d * FP32 + 2 * t * FP32)


def predict(cfg: dict) -> dict:
    """{"parameters", "gradients", "optimizer", "activations"} in bytes. Parameters and gradients are float32 (autocast
    changes what is computed, not what is stored); AdamW keeps two float32 states per parameter (the running mean
    and the running mean of squares) and, fused, one float32 step count per parameter tensor."""
    n = parameter_count(cfg)
    return {"parameters": n * FP32, "gradients": n * FP32,
            "optimizer": 2 * n * FP32 + parameter_tensors(cfg) * FP32, "activations": activations(cfg)}


def backward_working(cfg: dict) -> int:
    """Bytes a checkpointed block's backward holds beyond what is saved and recomputed, at its worst, in the MLP: the
    float32 gradient flowing in the residual stream, the gradient of the GELU's input (4d wide, in the compute dtype;
    the gradient of its output took the place of the GELU output it frees) and fc2's float32 weight gradient."""
    d, t = cfg["d"], cfg["batch"] * cfg["seq"]
    c = 2 if cfg["precision"] in HALF else FP32
    return t * d * (FP32 + 4 * c) + 4 * d * d * FP32


def predict_peak(cfg: dict) -> dict:
    """The largest ``memory_allocated`` of a training step (the second: AdamW's state exists), predicted. Parameters,
    AdamW's state and the batch (x and y) are there throughout.

    Without checkpointing the peak comes as backward begins: every activation is still alive, and the squared
    error's backward makes a few float32 tensors of the output's size (four, at its worst); from there on each
    block's backward frees more than it makes. With checkpointing the saved activations are small, and the peak comes
    while a checkpointed part is recomputed and its MLP's backward runs: either in the last block (every saved
    activation still alive) or in the first (the gradients of every later block made by then), whichever is larger.
    Returns the peak and its parts."""
    d, t = cfg["d"], cfg["batch"] * cfg["seq"]
    b = predict(cfg)
    static = b["parameters"] + b["optimizer"] + 2 * t * d * FP32
    if cfg["checkpoint"] == "none":
        extra = 4 * t * d * FP32
        return {"peak": static + b["activations"] + extra, "static": static, "activations": b["activations"],
                "backward working set": extra, "when": "as backward begins (the loss's backward)"}
    half = activations_per_block(cfg)
    work = backward_working(cfg)
    if cfg["checkpoint"] == "block":
        recomputed = half["attention"] + half["mlp"] - t * d * FP32  # the block's input is kept already
        first_alive = 0  # the first block's input is the batch
    else:
        recomputed = half["mlp"] - t * d * FP32  # h, the MLP's input, is kept already
        first_alive = half["attention"]  # the first block's attention half, kept
    last = b["activations"] + recomputed + work
    first = b["gradients"] * (cfg["layers"] - 1) // cfg["layers"] + first_alive + recomputed + work
    when = "recomputing the last block" if last >= first else "recomputing the first block"
    return {"peak": static + max(last, first), "static": static, "activations": b["activations"],
            "recomputed": recomputed, "backward working set": work, "when": when}
