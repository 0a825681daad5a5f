"""Right: sort the kernels by start, merge overlapping ones into their union, clip each merged interval to the
window and count what is left."""


def gpu_idle_fraction(kernels, t0, t1):
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(kernels):
        if cur_e is not None and s <= cur_e:
            cur_e = max(cur_e, e)
            continue
        if cur_e is not None:
            busy += max(0.0, min(cur_e, t1) - max(cur_s, t0))
        cur_s, cur_e = s, e
    if cur_e is not None:
        busy += max(0.0, min(cur_e, t1) - max(cur_s, t0))
    return 1.0 - busy / (t1 - t0)
