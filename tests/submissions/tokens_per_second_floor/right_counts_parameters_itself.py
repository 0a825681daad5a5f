"""Right, with the parameters counted from the fields rather than read from config.n_params: the tied
embedding/head once, per layer the four attention projections (wk and wv of n_kv_heads heads), the MLP's three
matrices and two norms, and the final norm; K and V per position in bytes."""


def tokens_per_second_floor(config, bandwidth_bytes_per_s, context):
    d, hd = config.d_model, config.head_dim
    q, kv = config.n_heads * hd, config.n_kv_heads * hd
    layer = d * q + 2 * d * kv + q * d + 3 * d * config.d_ff + 2 * d
    params = config.vocab * d + config.n_layers * layer + d
    per_position = 2 * config.n_layers * kv * 2  # K and V, every layer, 2 bytes
    return float(bandwidth_bytes_per_s) / (2 * params + per_position * context)
