"""Wrong: warm-up, synchronize before and after each call, median of reps: right, except that it returns seconds
(perf_counter's unit) instead of milliseconds, so every time is 1000x too small."""
import statistics
import time

import gpucourse


def time_gpu(fn, *args, reps=10):
    fn(*args)
    samples = []
    for _ in range(reps):
        gpucourse.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        gpucourse.synchronize()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)
