"""Right: the lesson's fixed loop. Metrics stay on the device, the NaN check is a flag, copies are non_blocking."""
import torch
import torch.nn.functional as F


def train_fast(model, opt, batches):
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
