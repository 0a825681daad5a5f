"""The training loop of lesson 02: a small classifier trained with SGD, written with the usual synchronizations
(``train_naive``) and without any (``train_fixed``), plus the steps in between for the case study.

Every version returns the same thing, so the results can be compared exactly: ``{"losses": 1-D tensor (one loss per
step), "accuracy": 0-d tensor (fraction of training samples classified right, before each step's update),
"nan_seen": 0-d bool tensor}``. The fixed versions leave these on the device; the caller reads them once, at the end.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from gpucourse import device as _device


def make_problem(seed: int, steps: int = 8, batch: int = 64, features: int = 32, hidden: int = 64,
                 classes: int = 10, nan_at: int | None = None, dev=None, pin: bool | None = None) -> tuple:
    """(model, optimizer, batches): an MLP on ``dev`` (default: the course device) and ``steps`` batches of
    (x, y) on the host — pinned on a GPU (as ``DataLoader(pin_memory=True)`` does) unless ``pin=False``.
    ``nan_at``: the index of a batch whose inputs contain a NaN (the loss of that step is NaN)."""
    dev = torch.device(dev) if dev is not None else _device.torch_device()
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    w_true = torch.randn(features, classes, generator=gen)
    pin = (dev.type == "cuda") if pin is None else pin
    batches = []
    for i in range(steps):
        x = torch.randn(batch, features, generator=gen)
        y = (x @ w_true).argmax(1)
        if nan_at is not None and i == nan_at:
            x[0, 0] = float("nan")
        if pin:
            x, y = x.pin_memory(), y.pin_memory()
        batches.append((x, y))
    return model, opt, batches


def clone_problem(model, opt, batches) -> tuple:
    """A deep copy of the model with a fresh optimizer of the same class and settings as ``opt`` (its defaults, and
    each parameter group's own settings, e.g. an lr changed since), and the same batches."""
    model2 = copy.deepcopy(model)
    twin = dict(zip(map(id, model.parameters()), model2.parameters()))  # each parameter -> its copy
    groups = []
    for group in opt.param_groups:
        settings = {k: v for k, v in group.items() if k != "params"}
        groups.append(dict(settings, params=[twin[id(p)] for p in group["params"]]))
    return model2, type(opt)(groups, **opt.defaults), batches


def train_naive(model, opt, batches) -> dict:
    """The loop as it is often written: five synchronizing calls in every step (two blocking copies, `x.to(dev)` and
    `y.to(dev)`; the `if` on a tensor; `.item()`; `.cpu()`)."""
    dev = next(model.parameters()).device
    losses, correct, seen = [], 0, 0
    for x, y in batches:
        x, y = x.to(dev), y.to(dev)  # blocking copy (and from pageable memory, unless the loader pinned it)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if torch.isnan(loss):  # `if` on a tensor: the CPU waits for the loss
            raise FloatingPointError("loss is NaN")
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())  # reads the loss on the host
        correct += (logits.argmax(1) == y).sum().cpu()  # copies the metric to the host
        seen += len(y)
    return {"losses": torch.tensor(losses), "accuracy": correct / seen, "nan_seen": torch.tensor(False)}


def train_metrics_on_device(model, opt, batches) -> dict:
    """Step 1: losses and accuracy accumulate on the device; the NaN `if` and the blocking copies remain."""
    dev = next(model.parameters()).device
    losses = torch.empty(len(batches), device=dev)
    correct = torch.zeros((), dtype=torch.long, device=dev)
    seen = 0
    for i, (x, y) in enumerate(batches):
        x, y = x.to(dev), y.to(dev)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if torch.isnan(loss):
            raise FloatingPointError("loss is NaN")
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[i] = loss.detach()
        correct += (logits.argmax(1) == y).sum()
        seen += y.shape[0]
    return {"losses": losses, "accuracy": correct / seen, "nan_seen": torch.zeros((), dtype=torch.bool, device=dev)}


def train_async_nan_check(model, opt, batches) -> dict:
    """Step 2: the NaN check becomes a flag on the device, read by the caller after the loop."""
    dev = next(model.parameters()).device
    losses = torch.empty(len(batches), device=dev)
    correct = torch.zeros((), dtype=torch.long, device=dev)
    nan_seen = torch.zeros((), dtype=torch.bool, device=dev)
    seen = 0
    for i, (x, y) in enumerate(batches):
        x, y = x.to(dev), y.to(dev)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        nan_seen |= torch.isnan(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[i] = loss.detach()
        correct += (logits.argmax(1) == y).sum()
        seen += y.shape[0]
    return {"losses": losses, "accuracy": correct / seen, "nan_seen": nan_seen}


def train_fixed(model, opt, batches) -> dict:
    """Step 3, no synchronization left: copies from pinned memory with ``non_blocking=True`` as well."""
    dev = next(model.parameters()).device
    losses = torch.empty(len(batches), device=dev)
    correct = torch.zeros((), dtype=torch.long, device=dev)
    nan_seen = torch.zeros((), dtype=torch.bool, device=dev)
    seen = 0
    for i, (x, y) in enumerate(batches):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        nan_seen |= torch.isnan(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[i] = loss.detach()
        correct += (logits.argmax(1) == y).sum()
        seen += y.shape[0]
    return {"losses": losses, "accuracy": correct / seen, "nan_seen": nan_seen}


STEPS = {"naive": train_naive, "1: metrics on device": train_metrics_on_device,
         "2: async NaN check": train_async_nan_check, "3: pinned + non_blocking": train_fixed}


def to_host(result: dict) -> dict:
    """The result with every tensor on the host (this synchronizes: call it once, after the loop)."""
    return {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in result.items()}
