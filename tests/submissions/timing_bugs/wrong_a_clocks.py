"""Wrong: blames snippet A on clocks (no settle before timing) when its clock stops before the GPU has run the
products at all."""


def timing_bugs():
    return {"A": "clock_rampup", "B": "first_call", "C": "l2_cache"}
