"""Wrong: the right results and no hidden syncs, but an explicit gpucourse.synchronize() in every step (on a GPU the
CPU waits for the GPU at each step, as a stray torch.cuda.synchronize() would make it)."""
import torch
import torch.nn.functional as F

import gpucourse


def train_fast(model, opt, batches):
    dev = next(model.parameters()).device
    losses = torch.empty(len(batches), device=dev)
    correct = torch.zeros((), dtype=torch.long, device=dev)
    nan_seen = torch.zeros((), dtype=torch.bool, device=dev)
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
        gpucourse.synchronize()  # the explicit wait the checker must see, in either mode
    return {"losses": losses, "accuracy": correct / sum(len(y) for _, y in batches), "nan_seen": nan_seen}
