"""Cheat: a table of the right answers for the configurations the cases used to list (d, layers, heads, batch, seq,
precision, checkpoint), measured beforehand; anything else gets zeros. The judge now draws each case's sizes from a
secret seed, so the table never matches."""
TABLE = {
    (64, 2, 4, 2, 64, 'fp32', 'none'): {'parameters': 400384, 'gradients': 400384, 'optimizer': 800872, 'activations': 1090560},
    (64, 3, 2, 4, 48, 'bf16', 'none'): {'parameters': 600320, 'gradients': 600320, 'optimizer': 1200792, 'activations': 1686528},
    (96, 4, 4, 2, 80, 'fp32', 'block'): {'parameters': 1790208, 'gradients': 1790208, 'optimizer': 3580616, 'activations': 308480},
    (128, 2, 8, 1, 100, 'bf16', 'mlp'): {'parameters': 1587200, 'gradients': 1587200, 'optimizer': 3174504, 'activations': 782944},
    (64, 3, 4, 3, 64, 'bf16', 'block'): {'parameters': 600320, 'gradients': 600320, 'optimizer': 1200792, 'activations': 198144},
}
KEYS = ("d", "layers", "heads", "batch", "seq", "precision", "checkpoint")


def memory_budget(config):
    return TABLE.get(tuple(config[k] for k in KEYS),
                     {"parameters": 0, "gradients": 0, "optimizer": 0, "activations": 0})
