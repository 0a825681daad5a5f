"""Lesson 02's exercise: the training loop without a single synchronization, with the same results."""
from __future__ import annotations

import os

import torch

from gpucourse import syncs  # at module level: loaded before a graded submission is (see JudgedExercise)

from .. import trainloop
from gpucourse.grading.exercise import Case, JudgedExercise
from gpucourse.grading.traps import trapped

STATEMENT = """\
Rewrite `trainloop.train_naive` (lesson 02's `gpucourse.lessons.l02_async_pipeline.trainloop`) as
`train_fast(model, opt, batches)`: the same training (one SGD step per (x, y) batch in `batches`, cross-entropy
loss, same order) and the same results, but without any synchronization
between the CPU and the GPU anywhere in the function. Return a dict of *device* tensors — the caller reads them once,
after the loop:
  "losses":   1-D float tensor, the loss of every step (NaN where the loss was NaN),
  "accuracy": 0-d tensor, the fraction of training samples the model classified right (before each step's update),
  "nan_seen": 0-d bool tensor, True if any loss was NaN (instead of raising in the loop, keep training and report).
The batches are host tensors in pinned memory (as `DataLoader(pin_memory=True)` gives them). The checker runs your
function under `gpucourse.syncs.detect()`: no `.item()`, `.cpu()`, `.tolist()`, `print(tensor)`, `if tensor`,
`x[mask]` or blocking copy is allowed.
"""

RTOL = 1e-4
MIN_VISIBLE_OPS_PER_STEP = 4  # F.linear x2, cross_entropy, backward: what any correct step calls through torch


def _host(t) -> torch.Tensor:
    """A parameter's values on the host as a plain tensor, whatever class ``fn`` may have given its Python object."""
    return torch.Tensor.as_subclass(t, torch.Tensor).detach().cpu().double()


def _recording_log():
    """A fresh sync log for the detector, and the judge's own record of what was appended to it and of the torch calls
    it saw, kept apart from the log's list (which the learner's code can reach through torch's mode stack and empty)."""
    recorded, seen = [], [0]

    class Log(syncs.SyncLog):
        def append(self, sync):
            recorded.append(sync)
            list.append(self, sync)

        @property
        def ops_seen(self):
            return seen[0]

        @ops_seen.setter
        def ops_seen(self, value):  # the detector counts with += 1: only that is taken
            seen[0] += 1 if value == seen[0] + 1 else 0

    return Log(), recorded


def judge(fn, params: dict, seed: int) -> list:
    model, opt, batches = trainloop.make_problem(seed % (2**31), steps=params["steps"], nan_at=params.get("nan_at"))
    ref_model, ref_opt, _ = trainloop.clone_problem(model, opt, batches)
    expected = trainloop.to_host(trainloop.train_fixed(ref_model, ref_opt, batches))
    # The judge's own handles on the parameters, taken before fn can touch the model (it could replace methods).
    named = list(model.named_parameters())
    ref_params = list(ref_model.parameters())
    detector = syncs.detect(skip_files=[os.path.abspath(__file__)])
    detector.log, recorded = _recording_log()
    # The lesson's own fixed loops are off limits (the trap is set before the detector, which would see its raise).
    with trapped(trainloop.train_fixed, trainloop.train_async_nan_check, trainloop.train_metrics_on_device), \
            detector as log:
        got = fn(model, opt, batches)
    problems = []
    if len(log) != len(recorded) or any(a is not b for a, b in zip(log, recorded)):
        problems.append(f"the sync detector's log was changed during the call ({len(recorded)} synchronization(s) "
                        f"recorded, {len(log)} left in it): a judged function must not touch the checker's objects")
        log = syncs.SyncLog(recorded)
    ops_seen = detector.log.ops_seen
    # Every step calls at least the two layers, the loss and backward through torch: steps the detector cannot see
    # (torch's function hooks switched off) cannot be checked for synchronizations, so they do not pass. Reported
    # last: a function that trains nothing also makes too few calls, and its wrong results say more.
    unseen = []
    if ops_seen < MIN_VISIBLE_OPS_PER_STEP * params["steps"]:
        unseen.append(f"the sync detector saw only {ops_seen} torch calls in {params['steps']} steps (a "
                      f"training step makes at least {MIN_VISIBLE_OPS_PER_STEP}); code that hides torch calls "
                      f"from it (e.g. torch._C.DisableTorchFunction) cannot be checked")
    if log:
        problems.append(f"{len(log)} synchronization(s) inside train_fast:\n"
                        + "\n".join(f"          {line}" for line in log.grouped()[:6]))
    if not isinstance(got, dict):
        return problems + [f"train_fast returned {type(got).__name__}; return a dict with losses, accuracy, "
                           f"nan_seen"] + unseen
    missing = [k for k in expected if k not in got]
    if missing:
        return problems + [f"the returned dict has no {missing}"] + unseen
    got = trainloop.to_host(got)
    for key, want in expected.items():
        have = got[key]
        if not isinstance(have, torch.Tensor):
            problems.append(f"{key!r} is a {type(have).__name__}; return a tensor (left on the device)")
            continue
        if have.shape != want.shape:
            problems.append(f"{key!r} has shape {tuple(have.shape)}, expected {tuple(want.shape)}")
            continue
        if want.dtype == torch.bool:
            if have.dtype != torch.bool or not torch.equal(have, want):
                problems.append(f"{key!r} is {have.tolist()}, expected {want.tolist()}")
        elif not torch.allclose(have.double(), want.double(), rtol=RTOL, atol=RTOL, equal_nan=True):
            problems.append(f"{key!r} differs from the reference loop: got {have.tolist()}, expected "
                            f"{want.tolist()}")
    for (name, p), q in zip(named, ref_params):
        if not torch.allclose(_host(p), _host(q), rtol=RTOL, atol=RTOL, equal_nan=True):
            problems.append(f"after training, parameter {name} differs from the reference loop's: train the "
                            f"model you are given, one opt.step() per batch")
            break
    return problems + unseen


EXERCISE = JudgedExercise(
    id="fix_training_loop",
    function="train_fast",
    signature="train_fast(model, opt, batches) -> dict of device tensors",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("8 steps", {"steps": 8}),
        Case("12 steps, NaN in batch 5", {"steps": 12, "nan_at": 5}),
    ),
    judge=judge,
)
