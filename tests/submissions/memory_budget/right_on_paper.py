def memory_budget(config):
    d, L, h = config["d"], config["layers"], config["heads"]
    b, s = config["batch"], config["seq"]
    t = b * s
    n = L * (12 * d * d + 13 * d) + 2 * d  # per block: qkv, proj, fc1, fc2, two layer norms; final layer norm
    bf16 = config["precision"] == "bf16"
    c = 2 if bf16 else 4  # what linear layers and attention keep, in bytes per element
    w = 2 if bf16 else 0  # the bf16 copy of each weight under autocast
    stats = 2 * t * 4  # layer norm: mean and 1/std per token
    lse = b * h * s * 4
    attn = t * d * (4 + c + 3 * c + c) + stats + lse + w * 4 * d * d  # input, LN out, q k v, attention out
    mlp = t * d * (4 + c + 4 * c + 4 * c) + stats + w * 8 * d * d  # h, LN out, fc1 out, GELU out
    per_block = {"none": attn + mlp, "mlp": attn + 4 * t * d, "block": 4 * t * d}[config["checkpoint"]]
    acts = L * per_block - 4 * t * d + 2 * 4 * t * d + 2 * t * 4  # the batch is not counted; the end keeps 2
    return {"parameters": 4 * n, "gradients": 4 * n, "optimizer": 8 * n + 4 * (12 * L + 2), "activations": acts}
