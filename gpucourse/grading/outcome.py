"""What a submission's call did on one case, as its worker reported it: :class:`Outcome`, read from a "result" message
and checked field by field, since only the submission could have written anything else on the channel."""
from __future__ import annotations

import dataclasses

import torch

from . import compare, guards, protocol


class Opaque:
    """Stands for a returned object that is neither a tensor nor a number (e.g. None, a list), or for a tensor that
    has no plain values to send (``problem`` says why: sparse, meta...)."""

    def __init__(self, type_name: str, problem: str | None = None):
        self.type_name = type_name
        self.problem = problem


def unpack(value) -> tuple:
    """A returned value as the worker described it, with its device: a tensor, a number, or something else (an
    :class:`Opaque`)."""
    if not isinstance(value, dict):
        raise protocol.Malformed("result value is not a dict")
    if "tensor" in value:
        t = value["tensor"]
        if type(t) is not torch.Tensor or compare.dense_problem(t) is not None:  # the worker sends dense ones only
            raise protocol.Malformed("tensor field is not a dense tensor")
        return t, str(value.get("device", "?"))
    if "number" in value:
        return float(value["number"]), None
    problem = str(value["problem"])[:300] if "problem" in value else None  # a tensor without plain values
    return Opaque(str(value.get("type", "?")), problem), None


def counts(value) -> dict:
    """Counts sent by the worker (launches, ops), as {str: int}; raises on anything else."""
    return {str(k): int(v) for k, v in dict(value or {}).items()}


def meta_problem(out) -> list:
    """Why a returned value is not an output at all (None, a list, a tensor without plain values); [] for a tensor
    or a number."""
    if isinstance(out, Opaque):
        if out.problem is not None:
            return [out.problem]
        if out.type_name == "NoneType":
            return ["returned None: return the output tensor (did you forget `return out`?)"]
        return [f"returned a {out.type_name}, expected a torch.Tensor"]
    return []


@dataclasses.dataclass
class Outcome:
    """One call of the submission on a case: what it returned (``out``; ``out2`` from the second call where races
    are possible; ``noop_out`` from the call with every launch skipped), the input buffers after it, and what it
    launched and called (counts by name), with the worker's findings on memory (overruns, aliasing)."""
    out: torch.Tensor | float | Opaque
    out_device: str | None = None
    out2: torch.Tensor | float | Opaque | None = None
    buffers_after: list = dataclasses.field(default_factory=list)  # a tensor or None per argument
    noop_out: torch.Tensor | float | Opaque | None = None
    triton_launches: dict[str, int] = dataclasses.field(default_factory=dict)
    cuda_launches: dict[str, int] = dataclasses.field(default_factory=dict)
    ops: dict[str, int] = dataclasses.field(default_factory=dict)
    uses: dict[str, int] = dataclasses.field(default_factory=dict)
    course_launches: dict[str, int] = dataclasses.field(default_factory=dict)
    overruns: list[str] = dataclasses.field(default_factory=list)
    aliasing: list[str] = dataclasses.field(default_factory=list)
    past_end: torch.Tensor | None = None  # compare.past_end_writes(out), read by the worker beside the guard band

    @classmethod
    def from_message(cls, msg: dict, n_args: int) -> Outcome:
        """The outcome a "result" message reports for a call with ``n_args`` arguments. A message that is not what
        the worker sends (fields missing or of the wrong type) raises protocol.Malformed: only a submission that
        writes to the channel can produce one, so it is the submission's doing, not the grader's."""
        try:
            out, out_device = unpack(msg["out"])
            out2 = unpack(msg["out2"])[0] if msg.get("out2") is not None else None
            noop = unpack(msg["noop_out"])[0] if msg.get("noop_out") is not None else None
            buffers = list(msg.get("buffers_after") or [])
            if len(buffers) != n_args or any(b is not None and (type(b) is not torch.Tensor or
                                                                compare.dense_problem(b) is not None)
                                             for b in buffers):
                raise protocol.Malformed("input buffers missing")
            return cls(out=out, out_device=out_device, out2=out2, buffers_after=buffers, noop_out=noop,
                       triton_launches=counts(msg.get("triton_launches")),
                       cuda_launches=counts(msg.get("cuda_launches")), ops=counts(msg.get("ops")),
                       uses=counts(msg.get("uses")), course_launches=counts(msg.get("course_launches")),
                       overruns=[str(s) for s in list(msg.get("overruns") or [])[:10]],
                       aliasing=[str(s) for s in list(msg.get("aliasing") or [])[:10]],
                       past_end=past_end(msg.get("past_end")))
        except (KeyError, TypeError, ValueError, RuntimeError, OverflowError) as exc:
            raise protocol.Malformed(f"unreadable result ({type(exc).__name__})") from None

    # checker.evaluate reads an outcome by key, as it reads the dict checker.run_case makes in gpucourse.check.
    def __getitem__(self, key: str):
        if key not in _FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        return getattr(self, key) if key in _FIELDS else default


def past_end(value) -> torch.Tensor | None:
    """The worker's offsets written past the end of the output: distinct ints in [0, guards.GUARD), ascending, or
    None; anything else is protocol.Malformed (only a submission that writes to the channel sends it)."""
    if value is None:
        return None
    if type(value) is not list or len(value) > guards.GUARD or \
            any(type(i) is not int or not 0 <= i < guards.GUARD for i in value) or value != sorted(set(value)):
        raise protocol.Malformed("unreadable offsets past the end")
    return torch.tensor(value, dtype=torch.int64) if value else None


_FIELDS = frozenset(f.name for f in dataclasses.fields(Outcome))
