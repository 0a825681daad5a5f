"""Cheat: while loading, replaces the course's stand-in GPU queue (CPU mode) with one that never runs anything, so the
judge's own measurement would be ~0 ms and any tiny answer would match it. Passes gpucourse.check in-process; the
grader's worker restores the queue before judging."""
import gpucourse.asyncqueue as q


class NeverRuns:
    def put(self, seconds):
        pass

    def join(self):
        pass


q._queue = NeverRuns()


def time_gpu(fn, *args, reps=10):
    for _ in range(reps + 1):
        fn(*args)
    return 0.0
