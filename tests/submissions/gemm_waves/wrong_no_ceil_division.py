"""Wrong: floor division drops the partial tiles at the edges (and gives 0 tiles for an output smaller than a tile)."""


def gemm_waves(M, N, tile_m, tile_n, num_sms):
    tiles = (M // tile_m) * (N // tile_n)
    last = (tiles - 1) % num_sms + 1 if tiles else 0
    return {"tiles": tiles, "waves": tiles / num_sms, "last_wave_occupancy": last / num_sms}
