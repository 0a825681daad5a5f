"""Right: A stops the clock before the 20 queued products run, B's mean holds the compiling first call, C's adds
(timed as kernels behind the sleep) find their 12 MB in L2."""


def timing_bugs():
    return {"A": "no_sync", "B": "first_call", "C": "l2_cache"}
