def memory_budget(config):
    d, L, h = config["d"], config["layers"], config["heads"]
    b, s = config["batch"], config["seq"]
    t = b * s
    n = L * (12 * d * d + 13 * d) + 2 * d
    c = 2 if config["precision"] == "bf16" else 4
    stats = 2 * t * 4
    lse = b * h * s * 4
    # bug: under autocast each linear layer also keeps a bf16 copy of its weight for backward
    attn = t * d * (4 + c + 3 * c + c) + stats + lse
    mlp = t * d * (4 + c + 4 * c + 4 * c) + stats
    per_block = {"none": attn + mlp, "mlp": attn + 4 * t * d, "block": 4 * t * d}[config["checkpoint"]]
    acts = L * per_block - 4 * t * d + 2 * 4 * t * d + 2 * t * 4
    return {"parameters": 4 * n, "gradients": 4 * n, "optimizer": 8 * n + 4 * (12 * L + 2), "activations": acts}
