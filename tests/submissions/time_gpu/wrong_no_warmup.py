"""Wrong: synchronizes right and reports the median of reps timed calls, but makes no untimed warm-up call first, so
the slow first call (compilation, allocation) is one of the samples."""
import statistics
import time

import gpucourse


def time_gpu(fn, *args, reps=10):
    samples = []
    for _ in range(reps):
        gpucourse.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        gpucourse.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)
