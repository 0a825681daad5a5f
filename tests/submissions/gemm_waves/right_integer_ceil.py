"""Right: integer-only ceil division (-(-a // b)) and the remainder trick for the last wave."""


def gemm_waves(M, N, tile_m, tile_n, num_sms):
    tiles = (-(-M // tile_m)) * (-(-N // tile_n))
    last = (tiles - 1) % num_sms + 1
    return {"tiles": tiles, "waves": tiles / num_sms, "last_wave_occupancy": last / num_sms}
