"""Cheat (issue 17): lesson 02's own fixed loop, imported from the course package and passed off as train_fast.
While the learner's function runs, the course's solution raises instead of answering: an error naming it."""
from gpucourse.lessons.l02_async_pipeline import trainloop


def train_fast(model, opt, batches):
    return trainloop.train_fixed(model, opt, batches)
