"""Right: every weight (n_params, bf16) plus K and V of every position in every layer, n_kv_heads heads each."""


def tokens_per_second_floor(config, bandwidth_bytes_per_s, context):
    weights = config.n_params * 2
    kv_cache = 2 * config.n_layers * config.n_kv_heads * config.head_dim * context * 2
    return bandwidth_bytes_per_s / (weights + kv_cache)
