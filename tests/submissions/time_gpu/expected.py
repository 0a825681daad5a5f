"""What `gpucourse grade` must say of each known submission of time_gpu."""
EXPECTED = {

    # Issue 17: methods replaced on the stand-in queue object are put back after the call, and the judge measures on
    # a fresh queue: the timer's 0.05 ms is far from the truth.
    "cheat_patch_queue_object.py": {"status": "failed", "message": "returned 0.050 ms; one call takes",
                                    "flags": ["gpucourse.asyncqueue._queue.put (a method set on the object)"],
                                    "gpu": {"flags": []}},  # both cheats pass gpucourse.check in-process
    "cheat_fake_queue.py": {"status": "failed", "message": "one call takes"},
    "cheat_lying_float.py": {"status": "failed", "message": "returned 0.001 ms; one call takes"},
    # Has its synchronizes: told about units, not to synchronize, on every case.
    "wrong_returns_seconds.py": {"status": "failed",
                                 "message": "about 1000x less than the measured time: did you return seconds?",
                                 "fails": ["a 2 ms kernel", "a 1 ms kernel queued behind 30 ms of earlier work",
                                           "a 1 ms kernel whose first call takes 60 ms more, reps=2"]},
    # The median of 10 hides the slow first call; the case timed with reps=2 does not.
    "wrong_no_warmup.py": {"status": "failed", "message": "Make an untimed warm-up call first",
                           "fails": ["a 1 ms kernel whose first call takes 60 ms more, reps=2"],
                           "passes": ["a 2 ms kernel", "a 1 ms kernel queued behind 30 ms of earlier work"]},
}
GPU_ONLY = False
