"""One bug (of method): a first pass over the blocks finds the row maximum, a second computes the exponentials: every
element is read twice."""
import torch


def online_softmax(x, block):
    rows, width = x.shape
    m = torch.full((rows,), float("-inf"), device=x.device)
    for j in range(0, width, block):
        m = torch.maximum(m, x[:, j:j + block].float().amax(dim=1))
    parts = [torch.exp(x[:, j:j + block].float() - m[:, None]) for j in range(0, width, block)]
    out = torch.cat(parts, dim=1)
    return (out / out.sum(dim=1, keepdim=True)).to(x.dtype)
