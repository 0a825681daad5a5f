"""Cheat: the naive loop run with torch's function hooks switched off *inside the call*,
so the sync detector, a TorchFunctionMode, sees none of its synchronizations (on a GPU, torch's own sync debug mode
still reports them). The judge counts the torch calls it saw: far too few for the steps taken, so it fails; the
source is also flagged. (Hiding only the syncing calls would keep the count up: that is what the flag is for.)"""
import torch
import torch.nn.functional as F


def train_fast(model, opt, batches):
    dev = next(model.parameters()).device
    losses, correct, seen, nan_seen = [], 0, 0, False
    with torch._C.DisableTorchFunction():
        for x, y in batches:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            nan_seen = nan_seen or bool(torch.isnan(loss))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            correct += int((logits.argmax(1) == y).sum())
            seen += y.shape[0]
    return {"losses": torch.tensor(losses, device=dev), "accuracy": torch.tensor(correct / seen, device=dev),
            "nan_seen": torch.tensor(nan_seen, device=dev)}
