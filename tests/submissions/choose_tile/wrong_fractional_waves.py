"""Wrong: counts waves as tiles / num_sms (a fraction): a partly empty last wave seems to cost only its share."""
import math


def choose_tile(M, N, K, tiles, num_sms):
    def cost(tile):
        tm, tn = tile
        n_tiles = math.ceil(M / tm) * math.ceil(N / tn)
        return (n_tiles / num_sms) * tm * tn / tiles[tile]

    return min(tiles, key=cost)
