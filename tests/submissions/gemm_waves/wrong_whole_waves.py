"""Wrong: waves rounded up to whole waves, where the statement asks for the fraction tiles / num_sms."""
import math


def gemm_waves(M, N, tile_m, tile_n, num_sms):
    tiles = math.ceil(M / tile_m) * math.ceil(N / tile_n)
    last = (tiles - 1) % num_sms + 1
    return {"tiles": tiles, "waves": math.ceil(tiles / num_sms), "last_wave_occupancy": last / num_sms}
