"""Wrong: picks the tile with the highest TFLOP/s per SM and ignores how the tiles fill the waves."""


def choose_tile(M, N, K, tiles, num_sms):
    return max(tiles, key=tiles.get)
