"""Cheat (issue 17): the slow loop (a .item() per step), then, before returning, it empties the sync detector's log,
found on torch's function-mode stack. The judge counts every synchronization as it is recorded, apart from the list
a submission can reach, and a log that shrank is a tampered one: fails."""
import torch
import torch.nn.functional as F
from torch.overrides import _get_current_function_mode_stack


def train_fast(model, opt, batches):
    dev = next(model.parameters()).device
    losses, seen = [], 0
    correct = torch.zeros((), dtype=torch.long, device=dev)
    nan_seen = torch.zeros((), dtype=torch.bool, device=dev)
    for x, y in batches:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        nan_seen |= torch.isnan(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        correct += (logits.argmax(1) == y).sum()
        seen += y.shape[0]
    for mode in _get_current_function_mode_stack():
        log = getattr(mode, "log", None)
        if isinstance(log, list):
            list.clear(log)
    return {"losses": torch.tensor(losses, device=dev), "accuracy": correct / seen, "nan_seen": nan_seen}
