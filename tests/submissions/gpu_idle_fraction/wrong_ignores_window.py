"""Wrong: merges the kernels right but never clips them to [t0, t1]: kernels across the window's edges count whole,
and kernels entirely outside it count too."""


def gpu_idle_fraction(kernels, t0, t1):
    merged = []
    for s, e in sorted(kernels):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    busy = sum(e - s for s, e in merged)
    return 1.0 - busy / (t1 - t0)
