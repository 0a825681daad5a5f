"""Wrong: the KV cache counted with n_heads (query heads) instead of n_kv_heads: right for multi-head attention
only."""


def tokens_per_second_floor(config, bandwidth_bytes_per_s, context):
    kv_cache = 2 * config.n_layers * config.n_heads * config.head_dim * context * 2
    return bandwidth_bytes_per_s / (config.n_params * 2 + kv_cache)
