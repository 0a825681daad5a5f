"""Wrong: starts the merge from the first kernel, so an empty list (a window in which the GPU ran nothing) raises
IndexError instead of returning 1.0."""


def gpu_idle_fraction(kernels, t0, t1):
    kernels = sorted(kernels)
    cur_s, cur_e = kernels[0]
    busy = 0.0
    for s, e in kernels[1:]:
        if s <= cur_e:
            cur_e = max(cur_e, e)
        else:
            busy += max(0.0, min(cur_e, t1) - max(cur_s, t0))
            cur_s, cur_e = s, e
    busy += max(0.0, min(cur_e, t1) - max(cur_s, t0))
    return 1.0 - busy / (t1 - t0)
