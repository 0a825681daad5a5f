"""How a matmul's shape sets its speed (lesson 06): alignment of the rows (rates, zero-padding, and the
kernels cuBLAS picks) and the fixed-tile N sweep beside cuBLAS, read against the wave model. The measuring
functions raise GPURequiredError in CPU mode; the readers (``alignment_summary``, ``row_alignment``,
``kernel_family``, ``compare_with_model``) are pure Python and also run on recorded results."""
from __future__ import annotations

import torch

from gpucourse import device, dtypes
from gpucourse.progress import progress
from gpucourse.timing import bench, interleaved, settle

from . import kernels, waves
from .ladder import low_dtype


def alignment(m: int = 8192, n: int = 8192, ks=(8184, 8190, 8191, 8192, 8193, 8200), dtype=None,
              rounds: int = 5, rep_ms: float = 100) -> dict:
    """cuBLAS TFLOP/s of (m×k) @ (k×n) for each k, and for the unaligned ones the same product with k zero-padded
    to the next multiple of 8 (padding done inside the timed call, so its cost counts). Useful flops (2·m·n·k).
    Every variant is timed in ``rounds`` interleaved rounds (:func:`gpucourse.timing.interleaved`), so clock drift
    hits them alike; ``tflops`` is the median over the rounds, ``tflops_range`` the lowest and highest round.
    ``dtype``: default bf16 (fp16 on a T4: :func:`low_dtype`)."""
    device.require_gpu("The alignment sweep")
    dtype = dtype or low_dtype().torch
    ks = list(ks)
    big_a = torch.randn(m, max(ks) + 8, device="cuda", dtype=dtype)
    big_b = torch.randn(max(ks) + 8, n, device="cuda", dtype=dtype)
    fns = {}
    for k in ks:
        a = big_a[:, :k].contiguous()
        b = big_b[:k].contiguous()
        fns[f"K={k}"] = lambda a=a, b=b: torch.matmul(a, b)
        if k % 8:
            kp = -(-k // 8) * 8

            def padded(a=a, b=b, kp=kp):
                return torch.nn.functional.pad(a, (0, kp - a.shape[1])) @ \
                    torch.nn.functional.pad(b, (0, 0, 0, kp - b.shape[0]))

            fns[f"K={k} padded"] = padded
    settle(fns[f"K={ks[0]}"], seconds=1.0)
    runs = interleaved(fns, rounds=rounds, rep_ms=rep_ms)

    def rate(name, k):
        r = runs.get(name)
        if r is None:
            return None, None
        t = [2 * m * n * k / ms / 1e9 for ms in r.medians_ms]
        return 2 * m * n * k / r.median_ms / 1e9, [min(t), max(t)]

    out = {"m": m, "n": n, "dtype": dtypes.torch_name(dtype), "rounds": rounds, "k": ks, "tflops": [],
           "tflops_range": [], "padded_tflops": [], "padded_range": []}
    for k in ks:
        t, spread = rate(f"K={k}", k)
        p, pspread = rate(f"K={k} padded", k)
        out["tflops"].append(t)
        out["tflops_range"].append(spread)
        out["padded_tflops"].append(p)
        out["padded_range"].append(pspread)
    return out


def row_alignment(k: int, elem_bytes: int = 2, widest: int = 16) -> int:
    """The widest aligned load (in elements, a power of two up to ``widest`` bytes) that a row of ``k`` elements of
    ``elem_bytes`` bytes allows when every row starts where the previous one ends: 8 for bf16 rows of 8192, 2 for
    8190 (4-byte loads), 1 for 8191 (2-byte loads). cuBLAS's pre-Hopper kernel names end in ``align<this>``."""
    for name, v in (("k", k), ("elem_bytes", elem_bytes), ("widest", widest)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    a = max(1, widest // elem_bytes)
    while a > 1 and k % a:
        a //= 2
    return a


def alignment_summary(al: dict) -> list:
    """For each unaligned K of :func:`alignment`'s result: its rate, and the padded one, as fractions of the rate at
    the padded K (the next multiple of 8) where the sweep measured it. Pure Python (works on recorded sweeps)."""
    rate = dict(zip(al["k"], al["tflops"]))
    rows = []
    for k, t, p in zip(al["k"], al["tflops"], al["padded_tflops"]):
        if k % 8 == 0:
            continue
        kp = -(-k // 8) * 8
        ref = rate.get(kp)
        rows.append({"k": k, "padded_k": kp, "tflops": t, "padded_tflops": p, "aligned_tflops": ref,
                     "unpadded_share": t / ref if ref else None,
                     "padded_share": p / ref if ref and p else None})
    return rows


_ARCH_TAGS = (("sm100", "Blackwell (sm100)"), ("sm90", "Hopper (sm90)"), ("sm80", "Ampere (sm80)"),
              ("sm75", "Turing (sm75)"), ("sm70", "Volta (sm70)"))


def kernel_family(name: str) -> dict:
    """What a cuBLAS/CUTLASS kernel name says about the kernel: the GPU generation it was written for (``nvjet_sm90``,
    ``cutlass_80`` = sm80 ...), the tensor-core instruction shape of CUTLASS's ``s16816``/``s1688`` names (mma.sync
    m16n8k16 / m16n8k8), and the ``alignN`` suffix (elements per load of A and B). Read from the name only."""
    import re

    low = name.lower()
    m = re.search(r"cutlass_?(\d{2,3})_", low) or re.search(r"sm_?(\d{2,3})", low)
    arch = None
    if m:
        tag = f"sm{m.group(1)}"
        arch = next((label for t, label in _ARCH_TAGS if t == tag), tag)
    elif "ampere" in low:
        arch = "Ampere (sm80)"
    elif "turing" in low:
        arch = "Turing (sm75)"
    mma = re.search(r"s(16816|1688|884)gemm", low)
    shapes = {"16816": "mma.sync m16n8k16", "1688": "mma.sync m16n8k8", "884": "mma.sync m8n8k4"}
    align = re.search(r"align(\d+)", low)
    return {"name": name, "arch": arch, "mma": shapes[mma.group(1)] if mma else None,
            "align": int(align.group(1)) if align else None}


def short_kernel_name(name: str) -> str:
    """A kernel name without the C++ wrapping the profiler shows around CUTLASS kernels:
    ``void cutlass::Kernel2<cutlass_80_..._align2>(cutlass_80_..._align2::Params)`` -> ``cutlass_80_..._align2``."""
    import re

    m = re.match(r"^void\s+[\w:]+<(\w+)>\(", name)
    return m.group(1) if m else name


def cublas_kernels(m: int = 8192, n: int = 8192, ks=(8192, 8190, 8191), dtype=None) -> dict:
    """The GPU kernels one ``torch.matmul`` of (m×K) @ (K×n) runs for each K, read from ``torch.profiler`` (after one
    untraced call, so cuBLAS's choice is made). Returns ``{"m", "n", "dtype", "kernels": {K: [(name, µs), ...]}}``,
    longest first; copies and memsets are left out."""
    from torch.profiler import ProfilerActivity, profile

    from gpucourse import timeline

    device.require_gpu("Reading cuBLAS's kernel names")
    dtype = dtype or low_dtype().torch
    out = {"m": m, "n": n, "dtype": dtypes.torch_name(dtype), "kernels": {}}
    for k in ks:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        torch.matmul(a, b)
        torch.cuda.synchronize()
        with timeline.quiet_profiler(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.matmul(a, b)
            torch.cuda.synchronize()
        found = {}
        for e in prof.events():
            if not str(getattr(e, "device_type", "")).endswith("CUDA"):
                continue
            if e.name.lower().startswith(("memcpy", "memset")):
                continue
            found[e.name] = found.get(e.name, 0.0) + e.time_range.elapsed_us()
        out["kernels"][k] = sorted(found.items(), key=lambda kv: -kv[1])
        del a, b
    return out


def wave_sweep(m: int = 8192, k: int = 8192, ns=range(1024, 4097, 64), rep_ms: float = 50,
               dtype=None) -> dict:
    """Time the fixed-tile Triton kernel (:data:`kernels.WAVE_TILE`) and cuBLAS at every N, M = K fixed. Returns
    ``{"m", "k", "tile", "num_sms", "n": [...], "triton_ms": [...], "cublas_ms": [...]}``."""
    device.require_gpu("The wave sweep")
    dtype = dtype or low_dtype().torch  # bf16; fp16 on a T4
    ns = list(ns)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    big_b = torch.randn(k, max(ns), device="cuda", dtype=dtype)
    tri, cub = [], []
    settle(lambda: torch.matmul(a, big_b), seconds=1.0)
    for n in progress(ns, "wave sweep"):
        b = big_b[:, :n].contiguous()
        flops = 2 * m * n * k
        tri.append(bench(kernels.fixed_tile_matmul, a, b, flops=flops, dtype=dtype, rep_ms=rep_ms).median_ms)
        cub.append(bench(torch.matmul, a, b, flops=flops, dtype=dtype, rep_ms=rep_ms).median_ms)
    t = kernels.WAVE_TILE
    return {"m": m, "k": k, "tile": [t["BLOCK_M"], t["BLOCK_N"]], "num_sms": device.props().sm_count, "n": ns,
            "triton_ms": tri, "cublas_ms": cub}


def compare_with_model(sweep: dict, jump: float | None = None) -> dict:
    """The wave model against a measured sweep (:func:`wave_sweep`'s result; pure Python, works on recorded data).

    At every tile-column boundary of the sweep (N crossing a multiple of tile_n) the measured time ratio after/before
    is compared with the model's (full waves after/before). A measured *jump* is a ratio above ``jump`` (default:
    halfway between 1 and the smallest wave step the model predicts in the sweep). Returns the boundaries with both
    ratios, the model's predicted step positions, the measured ones, how many agree, and the model's time error
    (fitted: one tile's time from the median of measured/waves)."""
    m, tile_m, tile_n, sms = sweep["m"], sweep["tile"][0], sweep["tile"][1], sweep["num_sms"]
    ns, ms = sweep["n"], sweep["triton_ms"]
    full = [waves.full_waves(m, n, tile_m, tile_n, sms) for n in ns]
    rows = []
    for i in range(1, len(ns)):
        if -(-ns[i] // tile_n) != -(-ns[i - 1] // tile_n):  # a new column of tiles starts here
            rows.append({"n": ns[i], "measured_ratio": ms[i] / ms[i - 1], "model_ratio": full[i] / full[i - 1]})
    steps = [r["model_ratio"] for r in rows if r["model_ratio"] > 1]
    if jump is None:
        jump = 1 + (min(steps) - 1) / 2 if steps else 1.05
    for r in rows:
        r["measured_jump"] = r["measured_ratio"] > jump
        r["model_jump"] = r["model_ratio"] > 1
    per_wave = sorted(t / w for t, w in zip(ms, full))
    wave_ms = per_wave[len(per_wave) // 2]
    predicted = [w * wave_ms for w in full]
    err = [abs(p - t) / t for p, t in zip(predicted, ms)]
    return {"jump_threshold": jump, "boundaries": rows,
            "model_steps": [r["n"] for r in rows if r["model_jump"]],
            "measured_steps": [r["n"] for r in rows if r["measured_jump"]],
            "agree": sum(r["model_jump"] == r["measured_jump"] for r in rows), "of": len(rows),
            "wave_ms": wave_ms, "predicted_ms": predicted, "median_abs_error": sorted(err)[len(err) // 2],
            "max_abs_error": max(err)}
