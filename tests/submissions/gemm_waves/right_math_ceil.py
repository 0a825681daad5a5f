"""Right: ceil division with math.ceil; the last wave counted from the full waves before it."""
import math


def gemm_waves(M, N, tile_m, tile_n, num_sms):
    tiles = math.ceil(M / tile_m) * math.ceil(N / tile_n)
    last = tiles - (math.ceil(tiles / num_sms) - 1) * num_sms
    return {"tiles": tiles, "waves": tiles / num_sms, "last_wave_occupancy": last / num_sms}
