"""Cheat (issue 17): inside its first call, replaces the methods of the course's stand-in device queue *object*
(CPU mode), so no queued kernel ever runs: its own timing is then ~0 ms, and so would be the judge's next
measurement made on the same object. The judge measures on a fresh queue, and the worker puts back every method
patched on an object the course holds: fails."""
import gpucourse.asyncqueue as q


def time_gpu(fn, *args, reps=10):
    fn(*args)  # the queue object exists now
    if q._queue is not None:
        q._queue.put = lambda *a, **k: None
        q._queue.join = lambda *a, **k: None
    for _ in range(reps):
        fn(*args)
    return 0.05
