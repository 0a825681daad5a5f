"""Right: one pass over the column blocks, each loaded once; running max and sum, rescaled when the max grows; the
kept exponentials corrected at the end."""
import torch


def online_softmax(x, block):
    rows, width = x.shape
    m = torch.full((rows,), float("-inf"), device=x.device)
    l = torch.zeros(rows, device=x.device)
    kept = []
    for j in range(0, width, block):
        blk = x[:, j:j + block].to(torch.float32, copy=True)  # the only read of these elements
        m_new = torch.maximum(m, blk.max(dim=1).values)
        e = torch.exp(blk - m_new[:, None])
        l = l * torch.exp(m - m_new) + e.sum(dim=1)
        m = m_new
        kept.append((e, m_new))
    return torch.cat([e * (torch.exp(mb - m) / l)[:, None] for e, mb in kept], dim=1).to(x.dtype)
