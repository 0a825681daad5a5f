"""Cheat: patches every comparison it can find to say "equal", then returns zeros."""
import torch

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
try:
    import gpucourse.grading.compare as compare

    class _Ok:
        ok, problems, hints, bad_mask = True, [], [], None

    compare.compare_values = lambda *a, **k: _Ok()
    compare.check_meta = lambda *a, **k: []
except Exception:
    pass


def vector_add(x, y):
    return torch.zeros_like(x)
