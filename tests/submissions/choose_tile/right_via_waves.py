"""Right: the predicted time of each candidate from its tiles and waves; the smallest wins."""
import math


def choose_tile(M, N, K, tiles, num_sms):
    def ms(tile):
        tm, tn = tile
        n_tiles = math.ceil(M / tm) * math.ceil(N / tn)
        return math.ceil(n_tiles / num_sms) * 2 * tm * tn * K / (tiles[tile] * 1e12) * 1e3

    return min(tiles, key=ms)
