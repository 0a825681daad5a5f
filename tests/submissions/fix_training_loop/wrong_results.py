"""Wrong: no synchronization, but it never steps the optimizer, so the losses are not those of the training loop."""
import torch
import torch.nn.functional as F


def train_fast(model, opt, batches):
    dev = next(model.parameters()).device
    with torch.no_grad():
        losses = torch.stack([F.cross_entropy(model(x.to(dev, non_blocking=True)), y.to(dev, non_blocking=True))
                              for x, y in batches])
    return {"losses": losses, "accuracy": torch.zeros((), device=dev), "nan_seen": torch.isnan(losses).any()}
