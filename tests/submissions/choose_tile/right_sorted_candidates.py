"""Right: the same model written differently (time in arbitrary units: K and the 2 are common to all tiles)."""


def choose_tile(M, N, K, tiles, num_sms):
    scored = []
    for (tm, tn), rate in tiles.items():
        n_tiles = (-(-M // tm)) * (-(-N // tn))
        waves = -(-n_tiles // num_sms)
        scored.append((waves * tm * tn / rate, (tm, tn)))
    return sorted(scored)[0][1]
