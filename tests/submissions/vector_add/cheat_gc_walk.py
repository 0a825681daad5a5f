"""Cheat: walks gc.get_objects() for a tensor holding the expected answer (or the grader's seed/reference)."""
import gc

import torch


def vector_add(x, y):
    for obj in gc.get_objects():
        if isinstance(obj, dict) and ("expected" in obj or "seed" in obj):
            found = obj.get("expected")
            if isinstance(found, torch.Tensor) and found.shape == x.shape:
                return found.clone()
    candidates = [o for o in gc.get_objects()
                  if isinstance(o, torch.Tensor) and o.shape == x.shape and o is not x and o is not y]
    return candidates[0].clone() if candidates else torch.zeros_like(x)
