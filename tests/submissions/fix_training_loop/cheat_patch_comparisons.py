"""Cheat: sync-free but trains nothing. While loading it makes every comparison the judge could use say "equal"
(torch.allclose/equal/isclose, the judge's tolerance) and registers a global forward hook that feeds zeros to every
model, the judge's reference included; and it returns tensors of a subclass whose __torch_function__ answers
torch.allclose/equal with True. It passes only if one of the worker's defences fails: the restore of what the judge
relies on, or the plain values the judge gets instead of what the function returned."""
import torch

import gpucourse.lessons.l02_async_pipeline.exercises.fix_training_loop as judged

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(a, dtype=torch.bool)
judged.RTOL = float("inf")
torch.nn.modules.module.register_module_forward_hook(lambda module, inp, out: torch.zeros_like(out))


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal"):
            return True
        return super().__torch_function__(func, types, args, kwargs)


def train_fast(model, opt, batches):
    dev = next(model.parameters()).device
    return {"losses": torch.zeros(len(batches), device=dev).as_subclass(Liar),
            "accuracy": torch.zeros((), device=dev).as_subclass(Liar),
            "nan_seen": torch.zeros((), dtype=torch.bool, device=dev).as_subclass(Liar)}
