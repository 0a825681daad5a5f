"""Wrong: the last wave's occupancy as tiles % num_sms, which says 0 when the tiles fill the last wave exactly."""
import math


def gemm_waves(M, N, tile_m, tile_n, num_sms):
    tiles = math.ceil(M / tile_m) * math.ceil(N / tile_n)
    return {"tiles": tiles, "waves": tiles / num_sms, "last_wave_occupancy": (tiles % num_sms) / num_sms}
