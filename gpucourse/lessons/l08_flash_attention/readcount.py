"""A tensor that counts how often each of its elements is read, for the online-softmax exercise and the lesson's demo.

``reader = Reader(x, block)`` wraps ``x`` in ``reader.tensor``: a tensor subclass whose elements are reached only
through torch operations (``__torch_dispatch__``). Views (slicing, ``split``, ``t()``, ...) read nothing and stay
counted; any other operation that takes a counted tensor reads the elements it sees once, is counted, and returns a
plain tensor. So ``blk = x[:, j:j + b].float()`` reads a block once, and working on ``blk`` afterwards reads ``x``
no more, as a kernel works on a tile it loaded. ``reader.problems()`` says what broke the rules: elements read more
than once or never, an operation that saw more than ``block`` columns at a time, a write into ``x``.

How it keeps track: each counted tensor is paired with an index tensor of the same shape holding the flat position of
every element in ``x``; a view applied to the data is applied to the index too, so a read knows exactly which
elements of ``x`` it touched. The data lives in a registry, not on the tensor (no ``x._data`` to read around the
counting); a submission that reaches into this module can still defeat it, which the batch grader flags for a
human.
"""
from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

# Operations that read no element values (factories shaped like their argument, metadata).
_NO_READ = {"aten.empty_like", "aten.new_empty", "aten.new_empty_strided", "aten.zeros_like", "aten.ones_like",
            "aten.full_like", "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.empty_strided",
            "aten.randn_like", "aten.rand_like", "aten.is_same_size", "aten.sym_size", "aten.sym_stride",
            "aten.sym_numel", "aten.sym_storage_offset", "aten.is_contiguous", "aten.lift_fresh"}


class _Registry:
    """id(counted tensor) -> (tensor, reader, data, index). An object, not a module-level dict, on purpose: the
    grader's worker puts the course's module-level dicts back after each call into the learner's function."""

    def __init__(self):
        self.live = {}


_LIVE = _Registry()


def _op_name(func) -> str:
    return str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)


def _is_view(func) -> bool:
    return bool(getattr(func, "is_view", False))


def _writes_args(func) -> list:
    """Indices of the arguments the operation writes into (in-place and out= operations)."""
    try:
        return [i for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    except AttributeError:
        return []


class Counted(torch.Tensor):
    """A counted view of a :class:`Reader`'s tensor (see the module docstring). Never build one directly."""

    @staticmethod
    def __new__(cls, reader, data, index):
        t = torch.Tensor._make_wrapper_subclass(cls, data.shape, strides=data.stride(), dtype=data.dtype,
                                                device=data.device, requires_grad=False)
        _LIVE.live[id(t)] = (t, reader, data, index)
        return t

    def __repr__(self, *, tensor_contents=None):
        return f"Counted(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _op_name(func)
        entries = []

        def unwrap(which):
            def f(a):
                if isinstance(a, Counted):
                    entry = _LIVE.live.get(id(a))
                    if entry is None:
                        raise RuntimeError("a counted tensor from an earlier check was used")
                    if which == "data":
                        entries.append(entry)
                    return entry[2] if which == "data" else entry[3]
                return a
            return f

        data_args, data_kwargs = pytree.tree_map(unwrap("data"), (args, kwargs))
        if _is_view(func):
            out = func(*data_args, **data_kwargs)
            idx_args, idx_kwargs = pytree.tree_map(unwrap("index"), (args, kwargs))
            out_idx = func(*idx_args, **idx_kwargs)
            reader = entries[0][1]
            flat_out, spec = pytree.tree_flatten(out)
            flat_idx = pytree.tree_leaves(out_idx)
            wrapped = [Counted(reader, o, i) if isinstance(o, torch.Tensor) else o for o, i in zip(flat_out, flat_idx)]
            return pytree.tree_unflatten(wrapped, spec)
        if not any(name == p or name.startswith(p + ".") for p in _NO_READ):
            for _, reader, _, index in {id(e[0]): e for e in entries}.values():
                reader._read(index, name)
        written = _writes_args(func)
        positional = list(args)
        for i in written:
            if i < len(positional) and isinstance(positional[i], Counted):
                _LIVE.live[id(positional[i])][1]._wrote(name)
        for key, value in kwargs.items():
            if key == "out" and isinstance(value, Counted):
                _LIVE.live[id(value)][1]._wrote(name)
        return func(*data_args, **data_kwargs)


class Reader:
    """Counts the reads of ``x`` (a 2-D tensor) through ``self.tensor``; ``block``: the widest column range one
    operation may read at once (None: any)."""

    def __init__(self, x: torch.Tensor, block: int | None = None):
        if x.dim() != 2:
            raise ValueError("Reader counts the reads of a 2-D tensor")
        self.shape = tuple(x.shape)
        self.block = block
        data = x.detach().contiguous().clone()
        index = torch.arange(data.numel(), device=data.device).view(data.shape)
        self.counts = torch.zeros(data.numel(), dtype=torch.int64, device=data.device)
        self.ops = 0
        self.widest = (0, "")  # (columns, op) of the widest single read
        self.writes = []
        self.tensor = Counted(self, data, index)

    def _read(self, index: torch.Tensor, op: str) -> None:
        if index.numel() == 0:
            return
        flat = index.reshape(-1)
        self.counts += torch.bincount(flat, minlength=self.counts.numel())
        self.ops += 1
        cols = int(torch.unique(flat % self.shape[1]).numel())
        if cols > self.widest[0]:
            self.widest = (cols, op)

    def _wrote(self, op: str) -> None:
        self.writes.append(op)

    def close(self) -> None:
        """Forget the counted tensors (their data is freed)."""
        for key in [k for k, v in _LIVE.live.items() if v[1] is self]:
            del _LIVE.live[key]

    def reads(self) -> torch.Tensor:
        """How many times each element of x was read, shaped like x (on the CPU)."""
        return self.counts.view(self.shape).cpu()

    def problems(self) -> list:
        """What broke the read-once rule, as messages naming the first offending element."""
        out = []
        if self.writes:
            out.append(f"wrote into x ({self.writes[0]}): x is read-only; compute into tensors of your own")
        if self.block is not None and self.widest[0] > self.block:
            out.append(f"one operation ({self.widest[1]}) read {self.widest[0]} columns of x at once; block={self.block}:"
                       f" load x one column block (at most `block` columns) at a time")
        reads = self.reads()
        for bad, what in ((reads > 1, "read more than once"), (reads == 0, "never read")):
            if bool(bad.any()):
                i, j = (int(v) for v in bad.nonzero()[0])
                out.append(f"{int(bad.sum())} element(s) of x {what} (x[{i}, {j}] was read {int(reads[i, j])} "
                           f"time(s)); load each block of x once, as a copy "
                           f"(blk = x[:, j:j + block].to(torch.float32, copy=True)), and compute on blk")
        return out
