"""Wrong: merges the kernels in the order the trace gives them, as if it were sorted by start: on an unsorted trace an
earlier kernel that comes later in the list is never merged with the interval it overlaps."""


def gpu_idle_fraction(kernels, t0, t1):
    merged = []
    for s, e in kernels:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    busy = sum(max(0.0, min(e, t1) - max(s, t0)) for s, e in merged)
    return 1.0 - busy / (t1 - t0)
