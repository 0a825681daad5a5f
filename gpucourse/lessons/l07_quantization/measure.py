"""Lesson 07's measurements: the GEMV against its peers, the batch sweep, and an MLP block's decode step.

Each function takes the quantized GEMVs it times as arguments (``int8_fn(x, q, scale)``,
``int4_fn(x, packed, scales, group_size)``), so the lesson's kernels (:mod:`.kernels`) and the workbook's solutions
are timed the same way. Ratios are measured within one call: every contender of a shape is timed in turns
(:func:`gpucourse.timing.interleaved`), each repeat reading its weights from device memory (L2 flushed).

The peers a practitioner could use instead of a kernel of their own:

* ``bf16 cuBLAS``: ``F.linear(x, w)`` with bf16 weights: the baseline every ratio is against (on a GPU without bf16
  tensor cores, a T4, the activations, the baseline's weights and the dequantized weights are float16 instead:
  :func:`low_dtype`, which prints the sentence saying so; the result's ``dtype`` says which, its keys stay those
  of the bf16 course machine);
* ``torch dequant+matmul``: dequantize to bf16 with torch ops, then ``F.linear`` (eager);
* ``torch.compile dequant+matmul``: the same function through ``torch.compile`` (Inductor may fuse the dequantization
  into its own kernel);
* ``torchao int8 weight-only``: when ``torchao`` imports (it is not a dependency of the course).

Every repeat starts with L2 flushed by *reading* a buffer larger than L2 (``flush_l2="read"``,
:func:`gpucourse.timing.bench`), not by writing one as ``triton.testing.do_bench`` does: a write flush leaves L2 full
of dirty lines that the timed GEMV then writes back while it streams its weights, which adds about 10 µs to every
contender on the course's H100 and squeezes the ratios (the lesson measures both). A decode step finds L2 holding
the previous layer's weights, clean lines.

The functions run in CPU mode too (host timer, no compile, tiny sizes), so the tests can run them; only GPU figures
mean anything.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from gpucourse import device, dtypes
from gpucourse.progress import progress
from gpucourse.timing import copy_gbps, interleaved

from . import kernels, packing, quant

SHAPES = ((8192, 8192), (14336, 4096), (4096, 14336))  # (N, K): square, an MLP's up projection, its down projection
GROUP = 128
QUICK = {"warmup_ms": 1, "rep_ms": 5, "min_reps": 2}  # for tests: the code path, not the figures
FLUSH = {"flush_l2": "read"}  # see the module docstring


def _note(line: str) -> None:
    """A step of a long benchmark that is not one item of a loop (quantizing and compiling torchao), on stderr (a
    child process's last lines say where it stopped)."""
    print(line, file=sys.stderr, flush=True)


# bf16, or fp16 on a T4 (saying so): activations and unquantized weights (the kernels take either: kernels.ACT_DTYPES)
low_dtype = dtypes.tensor_core_16bit


def quantized_weights(n: int, k: int, group_size: int = GROUP, gen=None, dtype=None) -> dict:
    """A random 16-bit weight (N, K) (``dtype``, default :func:`low_dtype`: bf16, fp16 on a T4) and its int8
    per-channel and int4 group-wise versions, on this device."""
    dev = device.torch_device()
    dtype = dtype or low_dtype(say=False).torch
    w = torch.randn(n, k, generator=gen).to(dtype).to(dev)
    q8, s8 = quant.quantize(w, 8, "channel")
    q4, s4 = quant.quantize(w, 4, "group", group_size)
    return {"w": w, "q8": q8, "s8": s8, "packed": packing.pack_int4(q4), "s4": s4, "group_size": group_size}


def torch_dequant_int8(x, q, scale):
    """What one writes without a kernel: dequantize the whole matrix to x's dtype, then a library matmul."""
    return F.linear(x, (q.to(torch.float32) * scale[:, None]).to(x.dtype))


def torch_dequant_int4(x, packed, scales, group_size: int):
    b = packed.to(torch.int16)
    q = torch.stack((((b & 0xF) ^ 8) - 8, ((b >> 4) ^ 8) - 8), dim=2).reshape(packed.shape[0], -1)
    return F.linear(x, (q.to(torch.float32) * scales.repeat_interleave(group_size, dim=1)).to(x.dtype))


def torchao_int8(w: torch.Tensor, compile: bool = True):
    """``(fn(x), None)``: torchao's int8 weight-only linear for ``w`` (``torch.compile``-d if ``compile``), or
    ``(None, why)`` where torchao is missing or fails here."""
    try:
        import torchao  # noqa: F401
        from torchao.quantization import quantize_
        try:
            from torchao.quantization import Int8WeightOnlyConfig
            config = Int8WeightOnlyConfig()
        except ImportError:
            from torchao.quantization import int8_weight_only
            config = int8_weight_only()
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            lin.weight.copy_(w)
        quantize_(lin, config)
        fn = torch.compile(lin) if compile else lin
        with torch.no_grad():
            fn(torch.randn(1, w.shape[1], device=w.device, dtype=w.dtype))
        return (lambda x: fn(x)), None
    except Exception as exc:  # not installed, or a version that does not load with this torch
        return None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"


_TILE_MAJOR: dict = {}


def lesson_int4(x, packed, scales, group_size: int):
    """The lesson's int4 GEMV as a model would run it: where it takes the tc path (an H100: bf16 x, groups of 64 or
    more; :func:`kernels.w4a16_path`) the weights are made tile-major (:func:`kernels.tile_major`) on the first call
    for each weight and kept, as a model loader would do once, then :func:`kernels.w4a16_tiled`; elsewhere
    :func:`kernels.w4a16_gemv` as it is. The cache holds the 8 weights laid out most recently (and keeps them
    alive); a weight changed in place is laid out again (its version counter)."""
    if kernels.w4a16_path(x, group_size) != "tc":
        return kernels.w4a16_gemv(x, packed, scales, group_size)
    key = (id(packed), id(scales), group_size)
    hit = _TILE_MAJOR.get(key)
    if hit is None or hit[0] is not packed or hit[1] is not scales or hit[2] != (packed._version, scales._version):
        if len(_TILE_MAJOR) >= 8:
            _TILE_MAJOR.pop(next(iter(_TILE_MAJOR)))
        hit = _TILE_MAJOR[key] = (packed, scales, (packed._version, scales._version),
                                  kernels.tile_major(packed, scales, group_size))
    return kernels.w4a16_tiled(x, hit[3])


def peers(shapes=SHAPES, int8_fn=None, int4_fn=None, m: int = 1, group_size: int = GROUP, compile: bool = True,
          with_torchao: bool = False, rounds: int = 3, bench_kw=None, extra=None) -> dict:
    """Time, per (N, K) shape at batch ``m``: bf16 cuBLAS, our int8 and int4 GEMVs, the torch paths and torchao,
    plus the copy ceiling for each weight format (its least bytes moved at the measured copy bandwidth).
    ``extra``: more contenders, ``name -> fn`` taking the int8 arguments (a name starting "int8") or the int4 ones.
    Returns ``{"shapes": [...], "rows": [{shape, us: {name: µs}, ceiling_us: {...}, max_err: {...}}]}``."""
    int8_fn = int8_fn or kernels.w8a16_gemv
    int4_fn = int4_fn or kernels.w4a16_gemv
    bench_kw = {**FLUSH, **(bench_kw or {})}
    on_gpu = device.on_gpu()
    low = low_dtype().torch
    gen = torch.Generator().manual_seed(0)
    rows, notes = [], {}
    for n, k in progress(shapes, f"GEMV peers at M={m}"):
        d = quantized_weights(n, k, group_size, gen, low)
        x = torch.randn(m, k, generator=gen).to(low).to(d["w"].device)
        w, q8, s8, p4, s4 = d["w"], d["q8"], d["s8"], d["packed"], d["s4"]
        fns = {
            "bf16 cuBLAS": lambda: F.linear(x, w),
            "int8 (ours)": lambda: int8_fn(x, q8, s8),
            "int4 (ours)": lambda: int4_fn(x, p4, s4, group_size),
            "int8 torch dequant+matmul": lambda: torch_dequant_int8(x, q8, s8),
            "int4 torch dequant+matmul": lambda: torch_dequant_int4(x, p4, s4, group_size),
        }
        for name, fn in (extra or {}).items():
            if name.startswith("int8"):
                fns[name] = lambda fn=fn: fn(x, q8, s8)
            else:
                fns[name] = lambda fn=fn: fn(x, p4, s4, group_size)
        if compile and on_gpu:
            c8, c4 = torch.compile(torch_dequant_int8), torch.compile(torch_dequant_int4)
            fns["int8 torch.compile dequant+matmul"] = lambda: c8(x, q8, s8)
            fns["int4 torch.compile dequant+matmul"] = lambda: c4(x, p4, s4, group_size)
        if with_torchao and on_gpu:
            _note(f"{n} x {k}: torchao int8 weight-only, quantizing and compiling ...")
            ao, why = torchao_int8(w)
            if ao is not None:
                fns["int8 torchao weight-only (compiled)"] = lambda: ao(x)
            else:
                notes["torchao"] = why
        # Correctness first (each against its own exact answer), then time.
        exact8 = kernels.reference_gemv(x, quant.dequantize(q8, s8)).float()
        exact4 = kernels.reference_gemv(x, quant.dequantize(packing.unpack_int4_torch(p4), s4, group_size)).float()
        err = {}
        for name, fn in progress(list(fns.items()), f"{n} x {k}: first calls (compiling)", label=lambda i: i[0]):
            if name == "bf16 cuBLAS":
                continue
            out = fn().float()
            ref = exact8 if name.startswith("int8") else exact4
            err[name] = float((out - ref).abs().max() / ref.abs().max())
        timed = interleaved(fns, rounds=rounds, **bench_kw)
        us = {name: r.median_ms * 1e3 for name, r in timed.items()}
        ceiling = {}
        if on_gpu:
            for fmt in ("bf16", "int8", "int4"):
                nbytes = kernels.gemv_bytes(m, n, k, fmt, group_size)
                ceiling[fmt] = nbytes / (copy_gbps(nbytes // 2, **FLUSH) * 1e9) * 1e6  # read + written
        rows.append({"shape": [n, k], "m": m, "us": us, "ceiling_us": ceiling, "max_rel_err": err,
                     "bytes": {fmt: kernels.gemv_bytes(m, n, k, fmt, group_size) for fmt in ("bf16", "int8", "int4")}})
        del d, w, q8, s8, p4, s4, fns
    return {"m": m, "group_size": group_size, "dtype": dtypes.name(low), "rows": rows, "notes": notes}


def flush_effect(n: int = 8192, k: int = 8192, group_size: int = GROUP, rounds: int = 3, bench_kw=None) -> dict:
    """µs of bf16 cuBLAS and the lesson's int8 and int4 kernels at M = 1 on one (N, K) weight, once with L2
    flushed by writing (``do_bench``'s way) and once by reading, so the two protocols' ratios can be compared."""
    bench_kw = dict(bench_kw or {})
    low = low_dtype().torch
    d = quantized_weights(n, k, group_size, torch.Generator().manual_seed(3), low)
    x = torch.randn(1, k, device=d["w"].device).to(low)
    fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"]),
           "int8 (lesson kernel)": lambda: kernels.w8a16_gemv(x, d["q8"], d["s8"]),
           "int4 (lesson kernel)": lambda: lesson_int4(x, d["packed"], d["s4"], group_size)}
    out = {"n": n, "k": k, "dtype": dtypes.name(low), "us": {}}
    for how, flush in (("write", True), ("read", "read")):
        timed = interleaved(fns, rounds=rounds, **{**bench_kw, "flush_l2": flush})
        out["us"][how] = {name: r.median_ms * 1e3 for name, r in timed.items()}
    return out


def batch_sweep(n: int = 8192, k: int = 8192, ms=(1, 2, 4, 8, 16, 32, 64, 128, 256), int8_fn=None, int4_fn=None,
                group_size: int = GROUP, bench_kw=None) -> dict:
    """µs of bf16 cuBLAS, our int8 and our int4 kernels at each batch size M on one (N, K) weight."""
    int8_fn = int8_fn or kernels.w8a16_gemv
    int4_fn = int4_fn or lesson_int4
    bench_kw = {**FLUSH, **(bench_kw or {})}
    low = low_dtype().torch
    d = quantized_weights(n, k, group_size, torch.Generator().manual_seed(1), low)
    out = {"n": n, "k": k, "ms": list(ms), "dtype": dtypes.name(low),
           "us": {"bf16 cuBLAS": [], "int8 (ours)": [], "int4 (ours)": []}}
    for m in progress(ms, f"batch sweep {n} x {k}"):
        x = torch.randn(m, k, device=d["w"].device).to(low)
        fns = {"bf16 cuBLAS": lambda: F.linear(x, d["w"]),
               "int8 (ours)": lambda: int8_fn(x, d["q8"], d["s8"]),
               "int4 (ours)": lambda: int4_fn(x, d["packed"], d["s4"], group_size)}
        timed = interleaved(fns, rounds=2, **bench_kw)
        for name, r in timed.items():
            out["us"][name].append(r.median_ms * 1e3)
    return out


class MLPBlock:
    """A transformer MLP block (SwiGLU, as in Llama): ``down(silu(gate(x)) * up(x))``, gate and up fused into one
    (2I, H) weight. ``fmt``: "bf16", "int8" (per-channel) or "int4" (group-wise)."""

    def __init__(self, hidden: int, inter: int, fmt: str = "bf16", group_size: int = GROUP, gen=None,
                 weights=None, int8_fn=None, int4_fn=None):
        dev = device.torch_device()
        if weights is None:  # 16-bit: bf16, fp16 on a T4 (low_dtype)
            low = low_dtype(say=False).torch
            gu = (torch.randn(2 * inter, hidden, generator=gen) / hidden ** 0.5).to(low).to(dev)
            dn = (torch.randn(hidden, inter, generator=gen) / inter ** 0.5).to(low).to(dev)
            weights = (gu, dn)
        self.weights, self.fmt, self.inter, self.group_size = weights, fmt, inter, group_size
        self.int8_fn = int8_fn or kernels.w8a16_gemv
        self.int4_fn = int4_fn or lesson_int4
        if fmt == "int8":
            self.layers = [quant.quantize(w, 8, "channel") for w in weights]
        elif fmt == "int4":
            self.layers = []
            for w in weights:
                q, s = quant.quantize(w, 4, "group", group_size)
                self.layers.append((packing.pack_int4(q), s))
        elif fmt != "bf16":
            raise ValueError(f"fmt must be 'bf16', 'int8' or 'int4', not {fmt!r}")

    def linear(self, x, i: int):
        if self.fmt == "bf16":
            return F.linear(x, self.weights[i])
        if self.fmt == "int8":
            return self.int8_fn(x, *self.layers[i])
        return self.int4_fn(x, *self.layers[i], self.group_size)

    def __call__(self, x):
        h = self.linear(x, 0)
        return self.linear(F.silu(h[:, :self.inter]) * h[:, self.inter:], 1)

    def weight_bytes(self) -> int:
        if self.fmt == "bf16":
            return sum(w.numel() * 2 for w in self.weights)
        return sum(a.numel() * a.element_size() + s.numel() * 4 for a, s in self.layers)


def mlp_decode(hidden: int = 4096, inter: int = 14336, m: int = 1, int8_fn=None, int4_fn=None,
               group_size: int = GROUP, rounds: int = 3, bench_kw=None) -> dict:
    """One decode step (M tokens) through the MLP block with bf16, int8 and int4 weights: µs per step, weight bytes
    and the output's error against the bf16 block (relative to the output's largest magnitude, and relative
    Frobenius)."""
    bench_kw = {**FLUSH, **(bench_kw or {})}
    low = low_dtype().torch  # prints the sentence on a T4; the blocks' weights ask it again, silently
    gen = torch.Generator().manual_seed(2)
    blocks = {"bf16": MLPBlock(hidden, inter, "bf16", group_size, gen)}
    for fmt in ("int8", "int4"):
        blocks[fmt] = MLPBlock(hidden, inter, fmt, group_size, weights=blocks["bf16"].weights,
                               int8_fn=int8_fn, int4_fn=int4_fn)
    x = torch.randn(m, hidden, generator=gen).to(low).to(device.torch_device())
    ref = blocks["bf16"](x).double()
    errors = {}
    for fmt, blk in blocks.items():
        y = blk(x).double()
        errors[fmt] = {"max_rel": float((y - ref).abs().max() / ref.abs().max()),
                       "rel_fro": float(torch.linalg.norm(y - ref) / torch.linalg.norm(ref))}
    timed = interleaved({fmt: (lambda blk=blk: blk(x)) for fmt, blk in blocks.items()}, rounds=rounds, **bench_kw)
    return {"hidden": hidden, "inter": inter, "m": m, "group_size": group_size, "dtype": dtypes.name(low),
            "us": {fmt: r.median_ms * 1e3 for fmt, r in timed.items()},
            "weight_mb": {fmt: blk.weight_bytes() / 1e6 for fmt, blk in blocks.items()}, "errors": errors}
