"""Wrong: 16 per bf16 element (its bits) where the bandwidth counts bytes: 8x too low."""


def tokens_per_second_floor(config, bandwidth_bytes_per_s, context):
    bits = 16
    kv_elements = 2 * config.n_layers * config.n_kv_heads * config.head_dim * context
    return bandwidth_bytes_per_s / ((config.n_params + kv_elements) * bits)
