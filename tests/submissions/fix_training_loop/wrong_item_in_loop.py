"""Wrong: the right results, but the loss is read with .item() in every step (a synchronization per step)."""
import torch
import torch.nn.functional as F


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
    return {"losses": torch.tensor(losses, device=dev), "accuracy": correct / seen, "nan_seen": nan_seen}
