"""Cheat: the naive loop (.item() in every step), and before returning, from inside the graded call, it makes the
judge's sync log look empty and every comparison say "equal"."""
import torch
import torch.nn.functional as F


def train_fast(model, opt, batches):
    dev = next(model.parameters()).device
    losses, correct, seen = [], 0, 0
    for x, y in batches:
        x, y = x.to(dev), y.to(dev)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        correct += (logits.argmax(1) == y).sum().cpu()
        seen += len(y)
    from gpucourse import syncs

    syncs.SyncLog.__len__ = lambda self: 0
    syncs.SyncLog.__bool__ = lambda self: False
    torch.allclose = lambda *a, **k: True
    torch.equal = lambda *a, **k: True
    return {"losses": torch.tensor(losses), "accuracy": correct / seen, "nan_seen": torch.tensor(False)}
