"""GPU timings of lesson 09's compiled examples and of torch.compile's modes (default, reduce-overhead,
max-autotune): time per call, wall time, compile time, memory, and the calls it takes to pay a compile back."""
from __future__ import annotations

import os
import statistics
import tempfile
import time

import torch

from gpucourse import dtypes, timeline, timing
from gpucourse.progress import progress

from . import readtrace
from .compiled import (autotune_lines, gpu_kernel_count, inductor_log_lines, ln_scale_gelu, parse_autotune,
                       quiet_inductor, sin_chain)


# ---------------------------------------------------------------------------------------------------------------------
# GPU timings of the compiled examples and of the compile modes.


def _ms(fns: dict, rounds: int = 3, **kw) -> dict:
    res = timing.interleaved(fns, rounds=rounds, **kw)
    return {k: v.median_ms for k, v in res.items()}


low_dtype = dtypes.tensor_core_16bit  # bf16, or fp16 on a T4 (saying so): the lesson's GPU work


def fusion_examples(rounds: int = 3) -> dict:
    """Eager against torch.compile (default mode) for the two chains of the issue: four sins over 2^26 fp32, and
    LayerNorm + scale + GELU over 8192x8192 bf16 (fp16 on a T4). Kernel counts from the profiler, compile times,
    medians."""
    out = {}
    low = low_dtype()
    x = torch.randn(2**26, device="cuda")
    xb = torch.randn(8192, 8192, device="cuda", dtype=low.torch)
    w, b = (torch.randn(8192, device="cuda", dtype=low.torch) for _ in range(2))
    for name, fn, args, nbytes in (("sin chain, 2^26 fp32", sin_chain, (x,), 2 * x.numel() * 4),
                                   (f"LayerNorm+scale+GELU, 8192x8192 {low.short}", ln_scale_gelu, (xb, w, b),
                                    2 * xb.numel() * 2)):
        torch._dynamo.reset()
        compiled = torch.compile(fn)
        t0 = time.perf_counter()
        compiled(*args)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        ms = _ms({"eager": lambda: fn(*args), "compiled": lambda: compiled(*args)}, rounds=rounds,
                 flush_l2="read")
        out[name] = {"eager_ms": ms["eager"], "compiled_ms": ms["compiled"], "speedup": ms["eager"] / ms["compiled"],
                     "compile_s": compile_s, "eager_kernels": gpu_kernel_count(fn, *args),
                     "compiled_kernels": gpu_kernel_count(compiled, *args), "ideal_bytes": nbytes,
                     "compiled_gbps": timing.gbps(nbytes, ms["compiled"])}
    return out


def small_mlp(width: int = 512, depth: int = 6):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to("cuda", low_dtype(say=False).torch).eval()


def gpu_time_per_call(fn, calls: int = 50) -> dict:
    """What one call of ``fn`` costs the GPU, from the profiler: ``calls`` calls back to back under
    ``torch.profiler`` (CUDA activity only), the trace written and read back with :mod:`readtrace`, every kernel's,
    copy's and memset's duration summed and divided by ``calls`` (:func:`readtrace.per_call`): ``us``, ``ops`` and
    ``by_name``. The device's own clock times each kernel, so the host's speed does not enter, except where the GPU
    waits for it between kernels: that time is in no kernel."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with timeline.quiet_profiler(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="gpucourse09-") as tmp:
        path = os.path.join(tmp, "calls.json")
        prof.export_chrome_trace(path)
        events = readtrace.load(path)
    return readtrace.per_call(events, calls)


def wall_us(fns: dict, calls: int = 300, rounds: int = 3) -> dict:
    """µs per call of each ``name -> fn``, on the host's clock: ``calls`` calls back to back, then one
    synchronize, the elapsed time divided by ``calls``; median over ``rounds`` rounds, the functions in turn within
    each round. This is the rate a loop that keeps calling the function gets, whatever limits it (the host issuing
    the calls, or the GPU running them)."""
    if calls < 1 or rounds < 1:
        raise ValueError(f"calls and rounds must be at least 1, got {calls} and {rounds}")
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    runs: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            runs[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {name: statistics.median(v) for name, v in runs.items()}


def _memory() -> dict:
    """Bytes the caching allocator holds now: ``allocated`` (in live tensors) and ``reserved`` (taken from the
    driver, live or cached), after returning what is cached and free (``empty_cache``), so that what remains is what
    something still owns. A CUDA graph's private memory pool stays reserved as long as the graph lives. cuBLAS's
    workspaces (allocated by the first matmul on each stream, and freed by PyTorch when it captures a graph) are
    freed first, so that they do not count for whichever measurement happened to allocate or free them."""
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}


def _grown_mib(before: dict, after: dict) -> dict:
    return {k: (after[k] - before[k]) / 2**20 for k in before}


MODES = ("default", "reduce-overhead", "max-autotune")
MLP = {"batch": 8, "width": 512, "depth": 6}


def compile_modes(rounds: int = 3, calls: int = 300, profile_calls: int = 50, batch: int = MLP["batch"],
                  width: int = MLP["width"], depth: int = MLP["depth"]) -> dict:
    """A launch-bound forward (a ``depth``-layer MLP of Linear+GELU at ``batch`` rows: a dozen tiny kernels) eagerly
    and under each compile mode: default (fusion), reduce-overhead (fusion + CUDA graphs: one replay instead of a
    launch per kernel) and max-autotune (also tries Triton templates for the matmuls, and uses CUDA graphs). For
    each, per forward and in µs:

    * ``event_us``: each call bracketed by CUDA events, the median (what the lesson printed before it printed the
      rest). The GPU is idle between calls here, waiting for the host, so the two events time the host issuing one
      call: host time, not GPU time.
    * ``wall_us``: ``calls`` calls back to back on the host's clock (:func:`wall_us`): what a serving loop gets.
    * ``gpu_us`` and ``gpu_ops``: the GPU's own work per call, from the profiler (:func:`gpu_time_per_call`).

    Also each mode's compile time (its first three calls: CUDA graphs are recorded on a later call than the first),
    the memory it holds once compiled (``memory_mib``: growth of the allocator's allocated and reserved bytes), and
    for max-autotune what its search timed (``autotune``, from :func:`parse_autotune`). ``ms`` and ``speedup`` are
    ``event_us`` in ms and eager's over it (kept for the recorded results that predate the other columns)."""
    model = small_mlp(width, depth)
    x = torch.randn(batch, width, device="cuda", dtype=low_dtype().torch)
    res: dict = {"eager": {"compile_s": 0.0, "memory_mib": {"allocated": 0.0, "reserved": 0.0}, "autotune": [],
                           "inductor_log": []}}
    fns = {"eager": lambda: model(x)}
    torch._dynamo.reset()  # once: each mode is its own entry of dynamo's cache, and all stay compiled
    with torch.no_grad():
        for mode in progress(MODES, "compiling each mode", label=lambda m: m):
            before = _memory()
            with quiet_inductor() as log:
                f = torch.compile(model, mode=None if mode == "default" else mode)
                t0 = time.perf_counter()
                for _ in range(3):  # CUDA graphs are recorded on a later call than the first
                    f(x)
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - t0
            res[mode] = {"compile_s": compile_s, "memory_mib": _grown_mib(before, _memory()),
                         "autotune": parse_autotune(log["stderr"]), "inductor_log": inductor_log_lines(log)}
            fns[mode] = (lambda f=f: f(x))
        with quiet_inductor():  # nothing should compile again here; if something does, it prints nothing either
            ms = _ms(fns, rounds=rounds, flush_l2=False)
            wall = wall_us(fns, calls=calls, rounds=rounds)
            gpu = {name: gpu_time_per_call(fn, calls=profile_calls) for name, fn in fns.items()}
    for k in res:
        res[k].update({"ms": ms[k], "speedup": ms["eager"] / ms[k], "event_us": ms[k] * 1e3, "wall_us": wall[k],
                       "wall_speedup": wall["eager"] / wall[k], "gpu_us": gpu[k]["us"], "gpu_ops": gpu[k]["ops"],
                       "gpu_kernels": {n: v["us"] for n, v in list(gpu[k]["by_name"].items())[:6]}})
    res["setup"] = {"batch": batch, "width": width, "depth": depth, "calls": calls, "profile_calls": profile_calls,
                    "rounds": rounds}
    return res


def break_even_calls(compile_s: float, eager_us: float, mode_us: float) -> float | None:
    """After how many calls a compile of ``compile_s`` seconds has paid for itself, saving ``eager_us - mode_us``
    µs a call; None when the mode saves nothing."""
    saved = eager_us - mode_us
    return compile_s / (saved * 1e-6) if saved > 0 else None


def modes_lines(res: dict) -> list:
    """The lines the notebook prints for :func:`compile_modes`: the table (host time by CUDA events, wall clock,
    GPU time, GPU operations, GPU busy share, compile time, calls to pay for it on this host), what each column is,
    the host's cost per GPU operation eagerly, the memory each mode holds, and what max-autotune's search timed."""
    modes = [m for m in res if m != "setup"]
    eager = res["eager"]
    setup = res.get("setup", {})
    calls = setup.get("calls", "many")
    lines = [f"µs per forward       {'events':>8} {'wall':>8} {'x eager':>8} {'GPU':>8} {'GPU ops':>8} "
             f"{'GPU busy':>9} {'compile':>8}"]
    for m in modes:
        r = res[m]
        pay = break_even_calls(r["compile_s"], eager["wall_us"], r["wall_us"]) if m != "eager" else None
        lines.append(f"{m:<20} {r['event_us']:8.1f} {r['wall_us']:8.1f} {r['wall_speedup']:7.2f}x {r['gpu_us']:8.1f} "
                     f"{r['gpu_ops']:8.0f} {r['gpu_us'] / r['wall_us']:9.0%} {r['compile_s']:7.1f}s"
                     + (f"   pays back after {pay:,.0f} calls on this host" if pay is not None else ""))
    lines += ["columns: events = each call between two CUDA events (the GPU idles between calls, so this is the "
              "host issuing one call);",
              f"  wall = {calls} calls back to back, then one synchronize, divided by {calls} (x eager: eager's wall "
              f"over the mode's);",
              "  GPU = the profiler's kernels, copies and memsets per call, summed; GPU ops = how many per call; "
              "GPU busy = GPU / wall."]
    if eager["gpu_ops"]:
        lines.append(f"eager: {eager['wall_us'] / eager['gpu_ops']:.1f} µs of wall clock per GPU operation launched, "
                     f"each of which runs {eager['gpu_us'] / eager['gpu_ops']:.1f} µs on the GPU on average")
    held = [f"{m} {res[m]['memory_mib']['reserved']:+.1f} MiB reserved ({res[m]['memory_mib']['allocated']:+.1f} "
            f"allocated)" for m in modes if m != "eager"]
    lines.append("memory each compiled mode holds after its first calls: " + "; ".join(held))
    for m in modes:
        lines += [f"{m}: {ln}" for ln in autotune_lines(res[m].get("autotune", [])) + res[m].get("inductor_log", [])]
    return lines
