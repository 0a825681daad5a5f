"""Poison and canary memory: make unwritten outputs and out-of-bounds writes visible, on the CPU and on a GPU.

* Poison: memory the learner's code allocates with ``torch.empty``/``empty_like``/``Tensor.new_empty`` during a
  checked call is filled with a NaN whose bit pattern no arithmetic produces, so an element the kernel never wrote is
  recognised bit for bit ("elements never written"), not mistaken for a wrong value.
* Canaries: each input is a view into a larger buffer whose other elements (a guard band before and after, and the
  gaps of a strided view) hold another distinctive bit pattern; every output allocated through the wrappers above gets
  a guard band after its end. After the call, a changed canary means the code wrote out of bounds.

What is caught: stores past either end of an input, into the gaps of a strided input, or up to ``GUARD`` elements
past the end of an output allocated with the wrapped functions (``empty_like`` of a strided input included). What
is not: stores further away than the guard band, into outputs allocated another way (``torch.zeros``, preallocated
globals), or into unrelated memory (those can crash the process, which the batch grader reports as ``crashed``).
"""
from __future__ import annotations

import contextlib

import torch

GUARD = 4096  # elements of canary on each side: more than one typical BLOCK_SIZE of overrun

# Float patterns are NaNs with payloads that arithmetic never creates (fresh NaNs are 0x7FC00000 / 0xFFC00000). An
# operation on a NaN keeps its payload, so the three patterns differ: a kernel that copies input canaries past the
# end of its output still changes the output's guard band, and a value computed from canaries is never "poison".
_PATTERNS = {  # dtype: (view dtype, poison, input canary, output guard band)
    torch.float32: (torch.int32, 0x7FC0DEAD, 0x7FC0CAFE, 0x7FC0BEEF),
    torch.float64: (torch.int64, 0x7FF8DEADDEADDEAD, 0x7FF8CAFECAFECAFE, 0x7FF8BEEFBEEFBEEF),
    torch.float16: (torch.int16, 0x7E5D, 0x7E5E, 0x7E5F),
    torch.bfloat16: (torch.int16, 0x7FDD, 0x7FDE, 0x7FDF),
    torch.int64: (torch.int64, -0x21524111, 0x5AFEC0DE, 0x0B0DCAFE),
    torch.int32: (torch.int32, -0x21524111, 0x5AFEC0DE, 0x0B0DCAFE),
    torch.int16: (torch.int16, -0x2153, 0x5AFE, 0x0B0D),
    torch.int8: (torch.int8, -0x53, 0x5A, 0x0B),
    torch.uint8: (torch.uint8, 0xAD, 0x5A, 0x0B),
}


def supported(dtype) -> bool:
    return dtype in _PATTERNS


def bits(t: torch.Tensor) -> torch.Tensor:
    view_dtype = _PATTERNS[t.dtype][0]
    return t if t.dtype == view_dtype else t.view(view_dtype)


def poison_(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in _PATTERNS and t.numel():
        bits(t).fill_(_PATTERNS[t.dtype][1])
    return t


def canary_(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in _PATTERNS and t.numel():
        bits(t).fill_(_PATTERNS[t.dtype][2])
    return t


def band_(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in _PATTERNS and t.numel():
        bits(t).fill_(_PATTERNS[t.dtype][3])
    return t


def is_band(t: torch.Tensor) -> torch.Tensor:
    return bits(t) == _PATTERNS[t.dtype][3]


def is_poison(t: torch.Tensor) -> torch.Tensor:
    """Bool mask: which elements still hold the poison bit pattern (never written)."""
    if t.dtype not in _PATTERNS:
        return torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    return bits(t) == _PATTERNS[t.dtype][1]


def is_canary(t: torch.Tensor) -> torch.Tensor:
    if t.dtype not in _PATTERNS:
        return torch.ones(t.shape, dtype=torch.bool, device=t.device)
    return bits(t) == _PATTERNS[t.dtype][2]


# ---------------------------------------------------------------------------------------------------------------------
# Inputs: views into canary-filled buffers. An argument travels as (buffer, shape, stride, offset).


def span(shape, stride) -> int:
    """Elements of storage a view with this shape and stride touches, from its first element to its last."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride))


ALIGN_BYTES = 256  # the CUDA caching allocator's blocks start on a 512-byte boundary; 256 covers every vector load


def lead(t: torch.Tensor) -> int:
    """Elements from the last ALIGN_BYTES boundary of ``t``'s storage to its first element, assuming the storage
    starts on one (fresh allocations do): 0 for a fresh tensor, 1 for ``x[1:]`` of a fresh float32 ``x``."""
    return t.storage_offset() % max(1, ALIGN_BYTES // t.element_size())


def placed_like(t: torch.Tensor, device=None) -> torch.Tensor:
    """A copy of ``t`` (on ``device``, default its own) in fresh storage, at the same ``lead``: ``x[1:]`` stays 4 bytes
    past a 16-byte boundary. Opt-in (``Exercise.keep_alignment``) for list arguments, which get no canaries."""
    if any(st < 0 for st in t.stride()):
        return t.to(device or t.device, copy=True)
    pad = lead(t)
    buf = torch.empty(pad + span(t.shape, t.stride()), dtype=t.dtype, device=device or t.device)
    view = buf.as_strided(t.shape, t.stride(), pad)
    view.copy_(t)
    return view


def guarded(t: torch.Tensor, guard: int = GUARD, keep_alignment: bool = False) -> dict:
    """A copy of ``t`` with the same shape and strides, inside a buffer with canaries around and between elements.
    ``keep_alignment`` (opt-in, ``Exercise.keep_alignment``): the view starts ``lead(t)`` elements past the guard
    band, so a view that was not 16-byte aligned stays so on the device (by default every input starts at ``guard``,
    which is aligned)."""
    if any(st < 0 for st in t.stride()):
        return {"buffer": t.contiguous().clone(), "shape": tuple(t.shape), "stride": tuple(t.contiguous().stride()),
                "offset": 0}
    if t.dtype not in _PATTERNS:  # no canary pattern for this dtype (FP8): the same strides, no canaries around
        buf = torch.empty(span(t.shape, t.stride()), dtype=t.dtype, device=t.device)
        buf.as_strided(t.shape, t.stride(), 0).copy_(t)
        return {"buffer": buf, "shape": tuple(t.shape), "stride": tuple(t.stride()), "offset": 0}
    n = span(t.shape, t.stride())
    pad = lead(t) if keep_alignment else 0
    buf = canary_(torch.empty(guard + pad + n + guard, dtype=t.dtype, device=t.device))
    view = buf.as_strided(t.shape, t.stride(), guard + pad)
    view.copy_(t)
    return {"buffer": buf, "shape": tuple(t.shape), "stride": tuple(t.stride()), "offset": guard + pad}


def view_of(arg: dict, buffer: torch.Tensor | None = None) -> torch.Tensor:
    buf = arg["buffer"] if buffer is None else buffer
    return buf.as_strided(arg["shape"], arg["stride"], arg["offset"])


def covered(arg: dict) -> torch.Tensor:
    """Bool mask over the buffer: True where an element of the view lives."""
    size = arg["buffer"].numel()
    mask = torch.zeros(size, dtype=torch.bool)
    idx = torch.arange(size).as_strided(arg["shape"], arg["stride"], arg["offset"])
    mask[idx.reshape(-1)] = True
    return mask


def canary_damage(arg: dict, after: torch.Tensor) -> list:
    """Buffer positions outside the view whose canary changed, as offsets relative to the view's first element."""
    if arg["buffer"].dtype not in _PATTERNS:
        return []
    outside = ~covered(arg)
    bad = outside & ~is_canary(after.reshape(-1).cpu())
    return (bad.nonzero().reshape(-1) - arg["offset"]).tolist()


# ---------------------------------------------------------------------------------------------------------------------
# Outputs: wrap torch's uninitialised allocators while the learner's code runs.


def dense(t: torch.Tensor) -> bool:
    """``t``'s elements fill a block of memory without gaps or overlaps, in some order of its dimensions (what
    ``torch.empty_like`` keeps the strides of)."""
    expected = 1
    for d in sorted(range(t.dim()), key=lambda d: (t.stride(d), t.shape[d])):
        if t.shape[d] != 1 and t.stride(d) != expected:
            return False
        expected *= t.shape[d]
    return True


def _shape_of(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        return tuple(size[0])
    return tuple(size)


@contextlib.contextmanager
def poisoned_allocations(guard: int = GUARD):
    """While active, ``torch.empty``, ``torch.empty_like`` and ``Tensor.new_empty`` return poisoned memory with a
    canary band after the end. Yields a list that collects ``(buffer, numel)`` per allocation for :func:`overruns`."""
    records = []
    orig_empty, orig_empty_like, orig_new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty

    def alloc(shape, dtype, device, requires_grad=False, stride=None):
        n = 1
        for s in shape:
            n *= int(s)
        if dtype not in _PATTERNS or n == 0:
            return None
        buf = orig_empty(n + guard, dtype=dtype, device=device)
        poison_(buf[:n])
        band_(buf[n:])
        records.append((buf, n))
        out = buf[:n].view(shape) if stride is None else buf.as_strided(shape, stride)
        return out.requires_grad_() if requires_grad else out

    simple_keys = {"dtype", "device", "requires_grad"}

    def empty(*size, **kw):
        if set(kw) <= simple_keys | {"layout"} and kw.get("layout", torch.strided) == torch.strided:
            kw.pop("layout", None)
            dtype = kw.get("dtype") or torch.get_default_dtype()
            dev = torch.device(kw["device"]) if kw.get("device") is not None else orig_empty(0).device
            out = alloc(_shape_of(size), dtype, dev, kw.get("requires_grad", False))
            if out is not None:
                return out
        return poison_(orig_empty(*size, **kw))

    def empty_like(x, *args, **kw):
        # torch.empty_like keeps the strides of a dense tensor (a transpose) and makes any other one (a strided view
        # such as x[::2]) contiguous: the guarded buffer does the same, so strided inputs' outputs get a band too.
        if not args and set(kw) <= simple_keys and x.layout == torch.strided:
            out = alloc(tuple(x.shape), kw.get("dtype") or x.dtype,
                        torch.device(kw["device"]) if kw.get("device") is not None else x.device,
                        kw.get("requires_grad", False),
                        stride=None if x.is_contiguous() or not dense(x) else tuple(x.stride()))
            if out is not None:
                return out
        return poison_(orig_empty_like(x, *args, **kw))

    def new_empty(self, *size, **kw):
        if set(kw) <= simple_keys:
            out = alloc(_shape_of(size), kw.get("dtype") or self.dtype,
                        torch.device(kw["device"]) if kw.get("device") is not None else self.device,
                        kw.get("requires_grad", False))
            if out is not None:
                return out
        return poison_(orig_new_empty(self, *size, **kw))

    torch.empty, torch.empty_like, torch.Tensor.new_empty = empty, empty_like, new_empty
    try:
        yield records
    finally:
        torch.empty, torch.empty_like, torch.Tensor.new_empty = orig_empty, orig_empty_like, orig_new_empty


def overruns(records) -> list:
    """One message per allocation whose guard band after the end was written to."""
    out = []
    for buf, n in records:
        bad = (~is_band(buf[n:])).nonzero().reshape(-1)
        if bad.numel():
            out.append(f"wrote {bad.numel()} element(s) past the end of a {n}-element output it allocated "
                       f"(up to index {n + int(bad.max())}, the last valid index is {n - 1}): mask the stores")
    return out
