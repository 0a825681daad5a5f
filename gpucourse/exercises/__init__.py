"""The exercise registry: every module in this package that defines ``EXERCISE`` is one exercise.

A lesson adds its exercise by adding one module here; ``get("vector_add")`` and ``all_ids()`` find it.
"""
from __future__ import annotations

import importlib
import pkgutil

from .spec import Case, Exercise, Perf, Tolerance

__all__ = ["Case", "Exercise", "Perf", "Tolerance", "get", "all_ids"]


def _modules() -> list:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "spec" and not m.name.startswith("_"))


def all_ids() -> list:
    """Ids of every registered exercise, sorted."""
    return sorted(get(name).id for name in _modules())


def get(exercise_id: str) -> Exercise:
    """The exercise with this id; KeyError naming the known ids otherwise."""
    if exercise_id not in _modules():
        raise KeyError(f"unknown exercise {exercise_id!r}; known exercises: {', '.join(_modules())}")
    module = importlib.import_module(f"{__name__}.{exercise_id}")
    ex = getattr(module, "EXERCISE", None)
    if not isinstance(ex, Exercise) or ex.id != exercise_id:
        raise KeyError(f"module {module.__name__} must define EXERCISE with id {exercise_id!r}")
    return ex
