"""Cheat: the naive loop (.item(), `if tensor`, blocking copies), with the sync detector blinded while loading:
detect() replaced by a context manager that sees nothing, its tables emptied, classify() neutered, its log made to
look empty, and a torch function mode pushed that hides torch ops from anything under it."""
import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import gpucourse.syncs as s


@contextlib.contextmanager
def _blind(*args, **kwargs):
    yield s.SyncLog()


s.detect = _blind
s.READS.clear()
s.DATA_DEPENDENT.clear()
s.classify.__code__ = (lambda func, args, kwargs, emulate: None).__code__
s.SyncLog.__len__ = lambda self: 0
s.SyncLog.__bool__ = lambda self: False


class _Quiet(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunction():
            return func(*args, **(kwargs or {}))


_Quiet().__enter__()


def train_fast(model, opt, batches):
    dev = next(model.parameters()).device
    losses, correct, seen = [], 0, 0
    nan_seen = False
    for x, y in batches:
        x, y = x.to(dev), y.to(dev)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if torch.isnan(loss):
            nan_seen = True
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        correct += (logits.argmax(1) == y).sum().cpu()
        seen += len(y)
    return {"losses": torch.tensor(losses), "accuracy": correct / seen, "nan_seen": torch.tensor(nan_seen)}
