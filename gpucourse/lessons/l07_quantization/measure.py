"""Lesson 07's measurements: the GEMV against its peers, the batch sweep, and an MLP block's decode step.

Each function takes the quantized GEMVs it times as arguments (``int8_fn(x, q, scale)``,
``int4_fn(x, packed, scales, group_size)``), so the lesson's kernels (:mod:`gpucourse.quant.kernels`) and the
workbook's solutions are timed the same way. Ratios are measured within one call: every contender of a shape is timed
in turns (:func:`gpucourse.timing.interleaved`), each repeat reading its weights from device memory (L2 flushed).

The peers a practitioner could use instead of a kernel of their own (the row names of :func:`peers`):

* ``bf16 cuBLAS``: ``F.linear(x, w)`` with bf16 weights: the baseline every ratio to bf16 is against (on a GPU
  without bf16 tensor cores, a T4, the activations, the baseline's weights and the dequantized weights are float16
  instead: :func:`low_dtype`, which prints the sentence saying so; the result's ``dtype`` says which, its keys stay
  those of the bf16 course machine);
* ``int8 one-liner, compiled`` (:func:`int8_one_liner`): what one writes without a kernel, the seed talk's
  ``F.linear(x, q.to(bf16)) * scale`` with the scale applied *after* the matmul (as gpt-fast's int8 layer does, its
  scales in bf16), through ``torch.compile`` with Inductor's ``coordinate_descent_tuning`` for this function only;
* ``int4 tinygemm`` (:func:`tinygemm_int4`): PyTorch's own int4 kernel, ``torch._weight_int4pack_mm`` (gpt-fast's
  and torchao's int4 weight-only path), on the same int4 values and scales converted once to its format
  (:func:`tinygemm_weights`);
* ``int8/int4 naive dequant+matmul``: the naive form, dequantizing the whole matrix in float32 (the scale applied to
  every weight before the matmul), then ``F.linear`` (eager; int8 also compiled);
* ``int8 torchao weight-only (compiled)``: when ``torchao`` imports (it is not a dependency of the course).

Every repeat starts with L2 flushed by *reading* a buffer larger than L2 (``flush_l2="read"``,
:func:`gpucourse.timing.bench`), not by writing one as ``triton.testing.do_bench`` does: a write flush leaves L2 full
of dirty lines that the timed GEMV then writes back while it streams its weights, which adds several µs to most
contenders on the course's H100 (the lesson measures both: :func:`flush_effect`). A decode step finds L2 holding
the previous layer's weights, clean lines.

The functions run in CPU mode too (host timer, no compile, tiny sizes; tinygemm through its CPU twin), so the tests
can run them; only GPU figures mean anything.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from gpucourse import device, dtypes
from gpucourse.progress import progress
from gpucourse.quant import kernels, packing, symmetric
from gpucourse.quant.linear import Int4Linear
from gpucourse.quant.tinygemm import (TINYGEMM_INNER_K_TILES, tinygemm_bytes, tinygemm_mm,  # noqa: F401 (re-exported)
                                      tinygemm_scales_and_zeros, tinygemm_unavailable, tinygemm_weights)
from gpucourse.timing import copy_gbps, interleaved

SHAPES = ((8192, 8192), (14336, 4096), (4096, 14336))  # (N, K): square, an MLP's up projection, its down projection
GROUP = 128

# The rows of the tables (one name per contender, the same in every measurement of the lesson).
BF16 = "bf16 cuBLAS"
INT8_SOLUTION, INT4_SOLUTION = "int8, workbook solution", "int4, workbook solution"
INT8_LESSON, INT4_LESSON = "int8, lesson kernel", "int4, lesson kernel"
ONE_LINER = "int8 one-liner, compiled"
TINYGEMM = "int4 tinygemm"
NAIVE8, NAIVE4 = "int8 naive dequant+matmul", "int4 naive dequant+matmul"
NAIVE8_COMPILED = "int8 naive dequant+matmul, compiled"
TORCHAO = "int8 torchao weight-only (compiled)"
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
    q8, s8 = symmetric.quantize(w, 8, "channel")
    q4, s4 = symmetric.quantize(w, 4, "group", group_size)
    return {"w": w, "q8": q8, "s8": s8, "packed": packing.pack_int4(q4), "s4": s4, "group_size": group_size}


def naive_dequant_int8(x, q, scale):
    """The naive form: the whole matrix scaled in float32 and rounded to x's dtype, then a library matmul. It
    scales every weight before the matmul, where the scale of a row could be applied once to its sum."""
    return F.linear(x, (q.to(torch.float32) * scale[:, None]).to(x.dtype))


def naive_dequant_int4(x, packed, scales, group_size: int):
    """The naive form for int4: unpack, scale every weight in float32, round to x's dtype, then a library matmul."""
    b = packed.to(torch.int16)
    q = torch.stack((((b & 0xF) ^ 8) - 8, ((b >> 4) ^ 8) - 8), dim=2).reshape(packed.shape[0], -1)
    return F.linear(x, (q.to(torch.float32) * scales.repeat_interleave(group_size, dim=1)).to(x.dtype))


def int8_one_liner(x, q, scale_low):
    """What one writes without a kernel, as the seed talk and gpt-fast's int8 layer do: the int8 weights cast to x's
    dtype inside the matmul call, the per-row scale (``scale_low``: in x's dtype, as gpt-fast stores it) applied to
    the product, once per output."""
    return F.linear(x, q.to(x.dtype)) * scale_low


ONE_LINER_OPTIONS = {"coordinate_descent_tuning": True}  # Inductor's option, for this compiled function only


def compiled_int8_one_liner():
    """:func:`int8_one_liner` through ``torch.compile`` with Inductor's ``coordinate_descent_tuning`` (it tunes the
    generated kernel's block sizes on its first call), passed as this compile's own option so it does not leak into
    the rest of the process; ``dynamic=False``: one kernel per shape, as a model's fixed layers get."""
    return torch.compile(int8_one_liner, dynamic=False, options=dict(ONE_LINER_OPTIONS))


def torchao_int8(w: torch.Tensor, compile: bool = True):
    """``(fn(x), None)``: torchao's int8 weight-only linear for ``w`` (``torch.compile``-d if ``compile``), or
    ``(None, why)`` where torchao is missing or fails here."""
    try:
        import warnings

        with warnings.catch_warnings():  # some torchao versions' sources carry invalid escapes: noise, not news
            warnings.simplefilter("ignore", SyntaxWarning)
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


def _prepared(cache: dict, packed, scales, group_size: int, make):
    """A weight's copy made by ``make(packed, scales, group_size)`` (a layout a kernel reads), kept in ``cache`` as a
    model loader would keep it: made on the first call for each weight, again when the weight was changed in place
    (its version counter). The cache holds the 8 weights laid out most recently (and keeps them alive)."""
    key = (id(packed), id(scales), group_size)
    hit = cache.get(key)
    if hit is None or hit[0] is not packed or hit[1] is not scales or hit[2] != (packed._version, scales._version):
        if len(cache) >= 8:
            cache.pop(next(iter(cache)))
        hit = cache[key] = (packed, scales, (packed._version, scales._version), make(packed, scales, group_size))
    return hit[3]


_LESSON: dict = {}
_TINYGEMM: dict = {}


def lesson_int4(x, packed, scales, group_size: int):
    """The lesson's int4 GEMV as a model runs it: the weight laid out once (kept: :func:`_prepared`) as
    :class:`gpucourse.quant.Int4Linear` lays it out, the layer lesson 11's model uses. Where the tc path runs (a
    Hopper GPU: bf16 x, groups of 64 or more; :func:`kernels.w4a16_path`) that is a tile-major copy
    (:func:`kernels.tile_major`) read by :func:`kernels.w4a16_tiled`; elsewhere :func:`kernels.w4a16_gemv` on the
    packed weight as it is."""
    return _prepared(_LESSON, packed, scales, group_size, lambda p, s, g: Int4Linear.from_int4(p, s, g))(x)


def tinygemm_int4(x, packed, scales, group_size: int):
    """PyTorch's int4 kernel (tinygemm, ``torch._weight_int4pack_mm``) with the int4 GEMVs' arguments: the weight
    converted to its format on the first call and kept (:func:`_prepared`), as :class:`gpucourse.quant.Int4Linear`
    converts it (:func:`tinygemm_weights`)."""
    return _prepared(_TINYGEMM, packed, scales, group_size,
                     lambda p, s, g: Int4Linear.from_int4(p, s, g, backend="tinygemm"))(x)


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def peers(shapes=SHAPES, int8_fn=None, int4_fn=None, m: int = 1, group_size: int = GROUP, compile: bool = True,
          with_torchao: bool = False, library: bool = True, rounds: int = 3, bench_kw=None, extra=None,
          names=(INT8_SOLUTION, INT4_SOLUTION)) -> dict:
    """Time, per (N, K) shape at batch ``m``, in one interleaved run: bf16 cuBLAS, the int8 and int4 GEMVs
    ``int8_fn`` and ``int4_fn`` (rows ``names``; by default the workbook's names, the lesson's kernels where none is
    given), the libraries' peers (``library``: tinygemm, and on a GPU with ``compile`` the compiled int8 one-liner),
    the naive torch paths (eager; the int8 one also compiled) and torchao (``with_torchao``), plus the copy ceiling
    for each weight format (its least bytes moved at the measured copy bandwidth). ``extra``: more contenders,
    ``name -> fn`` taking the int8 arguments (a name starting "int8") or the int4 ones. A peer that cannot run here
    (or fails its first call) is left out, and ``notes`` says why.
    Returns ``{"shapes": [...], "rows": [{shape, us: {name: µs}, ceiling_us: {...}, max_rel_err: {...}}], notes}``."""
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
        s8_low = s8.to(low)  # the one-liner's scales, in x's dtype as gpt-fast stores them
        fns, peer_fns = {BF16: lambda: F.linear(x, w)}, {}
        if library and compile and on_gpu:
            peer_fns[ONE_LINER] = lambda: (compiled_int8_one_liner(), None)
        fns[names[0]] = lambda: int8_fn(x, q8, s8)
        if library:
            why = tinygemm_unavailable(low, x.device)
            if why is None:
                peer_fns[TINYGEMM] = lambda: (tinygemm_weights(p4, s4, group_size), None)
            else:
                notes[TINYGEMM] = why
        fns[names[1]] = lambda: int4_fn(x, p4, s4, group_size)
        for name, fn in (extra or {}).items():
            if name.startswith("int8"):
                fns[name] = lambda fn=fn: fn(x, q8, s8)
            else:
                fns[name] = lambda fn=fn: fn(x, p4, s4, group_size)
        fns[NAIVE8] = lambda: naive_dequant_int8(x, q8, s8)
        fns[NAIVE4] = lambda: naive_dequant_int4(x, p4, s4, group_size)
        if compile and on_gpu:
            c8 = torch.compile(naive_dequant_int8, dynamic=False)
            fns[NAIVE8_COMPILED] = lambda: c8(x, q8, s8)
        if with_torchao and on_gpu:
            peer_fns[TORCHAO] = lambda: torchao_int8(w)
        # The peers: made (compiled, converted, quantized) before anything is timed; one that fails is left out.
        for name, make in peer_fns.items():
            _note(f"{n} x {k}: {name}: preparing ...")
            try:
                obj, why = make()
            except Exception as exc:  # a library's code, outside the course's control: say so, time the rest
                obj, why = None, _why(exc)
            if obj is None:
                notes[name] = why
            elif name == ONE_LINER:
                fns[name] = lambda c=obj: c(x, q8, s8_low)
            elif name == TINYGEMM:
                fns[name] = lambda tg=obj: tinygemm_mm(x, tg)
            else:
                fns[name] = lambda ao=obj: ao(x)
        # Correctness first (each against the exact product of the quantized weights), then time.
        exact8 = kernels.reference_gemv(x, symmetric.dequantize(q8, s8)).float()
        exact4 = kernels.reference_gemv(x, symmetric.dequantize(packing.unpack_int4_torch(p4), s4, group_size)).float()
        err = {}
        for name, fn in progress(list(fns.items()), f"{n} x {k}: first calls (compiling)", label=lambda i: i[0]):
            if name == BF16:
                continue
            try:
                out = fn().float()
            except Exception as exc:
                if name not in (ONE_LINER, TINYGEMM, TORCHAO):
                    raise  # the course's own code: an error is a bug to see
                notes[name] = _why(exc)
                continue
            ref = exact8 if name.startswith("int8") else exact4
            err[name] = float((out - ref).abs().max() / ref.abs().max())
        order = [BF16, ONE_LINER, TORCHAO, names[0], INT8_LESSON, TINYGEMM, names[1], INT4_LESSON]
        fns = {name: fns[name] for name in order + [other for other in fns if other not in order]
               if name in fns and (name == BF16 or name in err)}  # the tables' order: int8 rows, then int4 rows
        timed = interleaved(fns, rounds=rounds, **bench_kw)
        us = {name: r.median_ms * 1e3 for name, r in timed.items()}
        ceiling = {}
        if on_gpu:
            for fmt in ("bf16", "int8", "int4"):
                nbytes = kernels.gemv_bytes(m, n, k, fmt, group_size)
                ceiling[fmt] = nbytes / (copy_gbps(nbytes // 2, **FLUSH) * 1e9) * 1e6  # read + written
        rows.append({"shape": [n, k], "m": m, "us": us, "ceiling_us": ceiling, "max_rel_err": err,
                     "bytes": {fmt: kernels.gemv_bytes(m, n, k, fmt, group_size) for fmt in ("bf16", "int8", "int4")}})
        d = w = q8 = s8 = p4 = s4 = fns = None  # this shape's tensors freed before the next (the lambdas are done)
    return {"m": m, "group_size": group_size, "dtype": dtypes.name(low), "rows": rows, "notes": notes}


def flush_effect(n: int = 8192, k: int = 8192, group_size: int = GROUP, rounds: int = 3, bench_kw=None) -> dict:
    """µs of bf16 cuBLAS and the lesson's int8 and int4 kernels at M = 1 on one (N, K) weight, once with L2
    flushed by writing (``do_bench``'s way) and once by reading, so the two protocols' ratios can be compared; with
    each contender's least bytes moved (``bytes``) and this GPU's L2 size (``l2_bytes``; None off a GPU)."""
    bench_kw = dict(bench_kw or {})
    low = low_dtype().torch
    d = quantized_weights(n, k, group_size, torch.Generator().manual_seed(3), low)
    x = torch.randn(1, k, device=d["w"].device).to(low)
    fns = {BF16: lambda: F.linear(x, d["w"]),
           INT8_LESSON: lambda: kernels.w8a16_gemv(x, d["q8"], d["s8"]),
           INT4_LESSON: lambda: lesson_int4(x, d["packed"], d["s4"], group_size)}
    out = {"n": n, "k": k, "dtype": dtypes.name(low), "us": {},
           "bytes": {name: kernels.gemv_bytes(1, n, k, fmt, group_size)
                     for name, fmt in ((BF16, "bf16"), (INT8_LESSON, "int8"), (INT4_LESSON, "int4"))},
           "l2_bytes": device.props().l2_bytes if device.on_gpu() else None}
    for how, flush in (("write", True), ("read", "read")):
        timed = interleaved(fns, rounds=rounds, **{**bench_kw, "flush_l2": flush})
        out["us"][how] = {name: r.median_ms * 1e3 for name, r in timed.items()}
    return out


def batch_sweep(n: int = 8192, k: int = 8192, ms=(1, 2, 4, 8, 16, 32, 64, 128, 256), int8_fn=None, int4_fn=None,
                group_size: int = GROUP, rounds: int = 2, bench_kw=None) -> dict:
    """µs of bf16 cuBLAS, the lesson's int8 and int4 kernels (or ``int8_fn``, ``int4_fn``) and tinygemm (where it
    runs: bf16) at each batch size M on one (N, K) weight, each M in one interleaved run; with the rows of x each
    program of the lesson's kernels takes (``x_rows_per_block``: the int4 tc path's MX, the int8 dot path's
    BLOCK_M; 1 on a rows path), from the configuration that runs here (:func:`kernels.configs`)."""
    int8_fn = int8_fn or kernels.w8a16_gemv
    int4_fn = int4_fn or lesson_int4
    bench_kw = {**FLUSH, **(bench_kw or {})}
    low = low_dtype().torch
    d = quantized_weights(n, k, group_size, torch.Generator().manual_seed(1), low)
    tiny = tinygemm_unavailable(low, d["w"].device) is None
    names = [BF16, INT8_LESSON, INT4_LESSON] + ([TINYGEMM] if tiny else [])
    out = {"n": n, "k": k, "ms": list(ms), "dtype": dtypes.name(low), "us": {name: [] for name in names},
           "x_rows_per_block": {"int8": [], "int4": []}}
    cfg = kernels.configs()
    for m in progress(ms, f"batch sweep {n} x {k}"):
        x = torch.randn(m, k, device=d["w"].device).to(low)
        fns = {BF16: lambda: F.linear(x, d["w"]),
               INT8_LESSON: lambda: int8_fn(x, d["q8"], d["s8"]),
               INT4_LESSON: lambda: int4_fn(x, d["packed"], d["s4"], group_size)}
        if tiny:
            fns[TINYGEMM] = lambda: tinygemm_int4(x, d["packed"], d["s4"], group_size)
        timed = interleaved(fns, rounds=rounds, **bench_kw)
        for name, r in timed.items():
            out["us"][name].append(r.median_ms * 1e3)
        rows8 = m <= cfg["w8_rows_max_m"]
        out["x_rows_per_block"]["int8"].append(1 if rows8 else cfg[kernels.w8_config_name(m, False)]["BLOCK_M"])
        path4 = kernels.w4a16_path(x, group_size)
        out["x_rows_per_block"]["int4"].append(kernels.tc_config(m)["MX"] if path4 == "tc" else
                                               1 if path4 == "rows" else cfg["w4_dot"]["BLOCK_M"])
    return out


class MLPBlock:
    """A transformer MLP block (SwiGLU, as in Llama): ``down(silu(gate(x)) * up(x))``, gate and up fused into one
    (2I, H) weight. ``fmt``: "bf16", "int8" (per-channel) or "int4" (group-wise); the quantized GEMVs are
    ``int8_fn`` and ``int4_fn`` (the lesson's kernels by default)."""

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
            self.layers = [symmetric.quantize(w, 8, "channel") for w in weights]
        elif fmt == "int4":
            self.layers = []
            for w in weights:
                q, s = symmetric.quantize(w, 4, "group", group_size)
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
    """One decode step (M tokens) through the MLP block with bf16, int8 and int4 weights (the lesson's kernels, or
    ``int8_fn``, ``int4_fn``), and with int4 through tinygemm (``"int4 tinygemm"``, where it runs: bf16): µs per
    step, weight bytes and the output's error against the bf16 block (relative to the output's largest magnitude,
    and relative Frobenius)."""
    bench_kw = {**FLUSH, **(bench_kw or {})}
    low = low_dtype().torch  # prints the sentence on a T4; the blocks' weights ask it again, silently
    gen = torch.Generator().manual_seed(2)
    blocks = {"bf16": MLPBlock(hidden, inter, "bf16", group_size, gen)}
    for fmt in ("int8", "int4"):
        blocks[fmt] = MLPBlock(hidden, inter, fmt, group_size, weights=blocks["bf16"].weights,
                               int8_fn=int8_fn, int4_fn=int4_fn)
    notes = {}
    why = tinygemm_unavailable(low, device.torch_device())
    if why is None:
        blocks[TINYGEMM] = MLPBlock(hidden, inter, "int4", group_size, weights=blocks["bf16"].weights,
                                    int4_fn=tinygemm_int4)
    else:
        notes[TINYGEMM] = why
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
            "weight_mb": {fmt: blk.weight_bytes() / 1e6 for fmt, blk in blocks.items()}, "errors": errors,
            "notes": notes}


def int4_paths(shapes=SHAPES, group_size: int = GROUP, rounds: int = 3, bench_kw=None) -> dict:
    """The int4 paths of section 4 and "Going further" measured live, M = 1, in one interleaved run per shape: bf16
    cuBLAS, ``w4a16_gemv``'s rows path, its tc path on ``pack_int4``'s row layout, the tc path on tile-major weights
    (what :func:`lesson_int4` runs) and tinygemm; with each one's largest error against the exact product, relative
    to its largest value. The tc rows need a Hopper GPU (or the interpreter); where the tc path cannot run they are left
    out and ``notes`` says so."""
    bench_kw = {**FLUSH, **(bench_kw or {})}
    low = low_dtype().torch
    gen = torch.Generator().manual_seed(5)
    rows, notes = [], {}
    for n, k in progress(shapes, "int4 paths at M=1"):
        d = quantized_weights(n, k, group_size, gen, low)
        x = torch.randn(1, k, generator=gen).to(low).to(d["w"].device)
        p4, s4 = d["packed"], d["s4"]
        fns = {BF16: lambda: F.linear(x, d["w"]),
               "int4 rows path": lambda: kernels.w4a16_gemv(x, p4, s4, group_size, tc=False, rows=True)}
        if kernels.tc_available(x, group_size):
            tiled = kernels.tile_major(p4, s4, group_size)
            fns["int4 tc path, row layout"] = lambda: kernels.w4a16_gemv(x, p4, s4, group_size, tc=True)
            fns["int4 tc path, tile-major"] = lambda: kernels.w4a16_tiled(x, tiled)
        else:
            notes["tc"] = "the tensor-core path runs on a Hopper GPU (sm_90) with bf16 x and groups of 64 or more"
        why = tinygemm_unavailable(low, x.device)
        if why is None:
            tg = tinygemm_weights(p4, s4, group_size)
            fns[TINYGEMM] = lambda: tinygemm_mm(x, tg)
        else:
            notes[TINYGEMM] = why
        exact = kernels.reference_gemv(x, symmetric.dequantize(packing.unpack_int4_torch(p4), s4, group_size)).float()
        err = {name: float((fn().float() - exact).abs().max() / exact.abs().max())
               for name, fn in fns.items() if name != BF16}
        timed = interleaved(fns, rounds=rounds, **bench_kw)
        rows.append({"shape": [n, k], "us": {name: r.median_ms * 1e3 for name, r in timed.items()},
                     "max_rel_err": err})
        d = fns = None  # this shape's tensors freed before the next (the lambdas are done)
    return {"group_size": group_size, "dtype": dtypes.name(low), "rows": rows, "notes": notes}
