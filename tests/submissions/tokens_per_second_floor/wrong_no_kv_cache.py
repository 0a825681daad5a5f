"""Wrong: the weights alone; the KV cache each token reads is forgotten (off by 0.7% at context 512 for the lesson's
model, by far more at long contexts)."""


def tokens_per_second_floor(config, bandwidth_bytes_per_s, context):
    return bandwidth_bytes_per_s / (config.n_params * 2)
