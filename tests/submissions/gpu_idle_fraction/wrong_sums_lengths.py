"""Wrong: adds up every kernel's length (clipped to the window), so time when kernels of two streams run at once is
counted twice and the idle fraction comes out too low."""


def gpu_idle_fraction(kernels, t0, t1):
    busy = sum(max(0.0, min(e, t1) - max(s, t0)) for s, e in kernels)
    return 1.0 - busy / (t1 - t0)
