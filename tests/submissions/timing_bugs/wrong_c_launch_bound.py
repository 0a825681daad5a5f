"""Wrong: reads snippet C as launch-bound (events around back-to-back launches time the launches), missing that the
GPU sleep queued ahead hides the launches, so the adds run back to back from L2."""


def timing_bugs():
    return {"A": "no_sync", "B": "first_call", "C": "no_sync"}
