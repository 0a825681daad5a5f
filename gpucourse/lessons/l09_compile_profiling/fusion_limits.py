"""Where fusion stops (lesson 09, section 5): a matmul with its epilogue, fused by hand and by inductor's
modes; the RMSNorm exercise's reference against copy bandwidth and torch.compile; the course's own kernel inside a
compiled model."""
from __future__ import annotations

import contextlib

import torch

from gpucourse import device, dtypes, timing
from gpucourse.progress import progress

from . import kernels
from .compiled import autotune_lines, generated, gpu_ops, inductor_log_lines, parse_autotune, quiet_inductor
from .modes import _grown_mib, _memory, gpu_time_per_call, low_dtype


# ---------------------------------------------------------------------------------------------------------------------
# 5. Where fusion stops.


def epilogue_inputs(m: int | None = None, n: int | None = None, k: int | None = None, dtype=None):
    m = m or device.size(cpu=64, gpu=8192)
    n = n or device.size(cpu=48, gpu=8192)
    k = k or device.size(cpu=32, gpu=8192)
    dtype = dtype or (low_dtype().torch if device.on_gpu() else torch.float32)
    dev = device.torch_device()
    g = torch.Generator().manual_seed(3)
    a = torch.randn(m, k, generator=g).to(dev, dtype)
    b = (torch.randn(k, n, generator=g) / k ** 0.5).to(dev, dtype)
    bias = torch.randn(n, generator=g).to(dev, dtype)
    return a, b, bias


def _is_copy(name: str) -> bool:
    """A GPU operation that copies memory: the runtime's memcpy, or an ATen copy kernel (a CUDA graph copying new
    inputs into its own buffers runs ``multi_tensor_apply_kernel<...Copy...>``). Inductor's own kernels are never
    counted, even those named after a dtype conversion (``triton_poi_fused__to_copy...``); memsets are not copies."""
    low = name.lower()
    return low.startswith("memcpy") or ("copy" in low and not low.startswith("triton"))


def short_kernel(name: str, width: int = 44) -> str:
    """A kernel's name cut to be read in a line: no ``void``, no template arguments or parameters."""
    n = name[5:] if name.startswith("void ") else name
    n = n.replace("(anonymous namespace)::", "")
    for stop in ("<", "("):
        n = n.split(stop, 1)[0] if n.find(stop) > 0 else n
    n = n.split("::")[-1].strip()
    return n if len(n) <= width else n[:width - 1] + "…"


def gpu_split(per: dict) -> dict:
    """A :func:`gpu_time_per_call` result split into what copies memory and the rest: ``copy_us``, ``copy_ops`` and
    ``kernels`` (the other operations, {name: µs per call}, largest first)."""
    copy_us = sum(v["us"] for n, v in per["by_name"].items() if _is_copy(n))
    copy_ops = sum(v["n"] for n, v in per["by_name"].items() if _is_copy(n))
    return {"us": per["us"], "copy_us": copy_us, "copy_ops": copy_ops,
            "kernels": {n: v["us"] for n, v in per["by_name"].items() if not _is_copy(n)}}


EPILOGUE_MODES = ("default", "max-autotune", "max-autotune-no-cudagraphs")


def epilogue_timings(rounds: int = 5, rep_ms: float = 200, m: int | None = None, n: int | None = None,
                     k: int | None = None, profile_calls: int = 3) -> dict:
    """gelu(a @ b + bias) at 8192^3 bf16: torch eager (cuBLAS, then two passes), torch.compile default (cuBLAS + one
    fused pointwise kernel), max-autotune (Triton templates with the epilogue fused, if one wins; CUDA graphs) and
    max-autotune-no-cudagraphs (the same search, no graph), the course's hand-fused Triton kernel, and the plain
    matmul alone. ``ms``: medians of ``rounds`` interleaved rounds after a settle (``rounds_ms``: each round's, the
    spread to read a ratio against); ``gpu``: each one's GPU time per call from the profiler, split into copies and
    the rest (:func:`gpu_split`); ``compiled``: what each mode generated, its compile time, what its search timed and
    the memory it holds once compiled (a CUDA graph keeps its own copies of the inputs it was not given the address
    of in advance)."""
    a, b, bias = epilogue_inputs(m, n, k)
    fns = {"matmul alone (cuBLAS)": lambda: a @ b, "torch eager": lambda: kernels.bias_gelu_torch(a, b, bias),
           "hand-fused Triton (epilogue)": lambda: kernels.matmul_bias_gelu(a, b, bias)}
    info = {}
    torch._dynamo.reset()  # once: each mode is its own entry of dynamo's cache, and all stay compiled
    for mode in progress(EPILOGUE_MODES, "compiling the epilogue", label=lambda md: md):
        before = _memory()
        with quiet_inductor() as log:
            g = generated(kernels.bias_gelu_torch, a, b, bias, reset=False,
                          mode=None if mode == "default" else mode)
            g.pop("out")  # the first call's output: not memory the mode holds
            f = g["fn"]
            for _ in range(2):  # a CUDA graph is recorded on a later call than the first
                f(a, b, bias)
            torch.cuda.synchronize()
        info[mode] = {"kernels": [name for name, _ in g["kernels"]], "extern": g["extern"], "compile_s": g["seconds"],
                      "memory_mib": _grown_mib(before, _memory()), "autotune": parse_autotune(log["stderr"]),
                      "inductor_log": inductor_log_lines(log)}
        fns[f"torch.compile {mode}"] = (lambda f=f: f(a, b, bias))
    timing.settle(lambda: a @ b, seconds=1.0)
    with quiet_inductor():
        res = timing.interleaved(fns, rounds=rounds, flops=2 * a.shape[0] * a.shape[1] * b.shape[1], dtype=a.dtype,
                                 rep_ms=rep_ms)
        gpu = {name: gpu_split(gpu_time_per_call(fn, calls=profile_calls)) for name, fn in fns.items()}
    return {"ms": {name: r.median_ms for name, r in res.items()},
            "rounds_ms": {name: r.medians_ms for name, r in res.items()},
            "gpu": gpu, "compiled": info, "shape": [a.shape[0], b.shape[1], a.shape[1]], "rounds": rounds,
            "dtype": dtypes.torch_name(a.dtype), "out_mib": a.shape[0] * b.shape[1] * a.element_size() / 2**20}


def epilogue_lines(res: dict, base: str = "matmul alone (cuBLAS)") -> list:
    """The lines the notebook prints for :func:`epilogue_timings`: each median against the matmul alone with the
    spread of its rounds, then what each one ran on the GPU per call (the profiler's kernels, copies apart), then
    what each mode generated, its compile time, its search and the memory it holds."""
    ms, rounds, gpu = res["ms"], res.get("rounds_ms", {}), res.get("gpu", {})
    ref = ms[base]
    lines = []
    if res.get("shape") and res.get("out_mib"):
        m, n, k = res["shape"]
        lines.append(f"gelu(a @ b + bias), M={m} N={n} K={k} {dtypes.short(res.get('dtype', 'bfloat16'))}: the output "
                     f"is {res['out_mib']:,.0f} MiB, which each extra pass reads and writes")
    lines.append(f"{'':<36}{'median':>10} {'x matmul':>9}   rounds (min-max), ms")
    for name, t in ms.items():
        r = rounds.get(name) or [t]
        lines.append(f"{name:<36}{t:7.3f} ms {t / ref:8.2f}x   {min(r):.3f}-{max(r):.3f}")
    lines.append("GPU time per call (profiler), by kernel:")
    for name, g in gpu.items():
        parts = [f"{us / 1e3:.3f} {short_kernel(kn)}" for kn, us in list(g["kernels"].items())[:3]]
        if g["copy_ops"]:
            n = round(g["copy_ops"])
            parts.append(f"{g['copy_us'] / 1e3:.3f} in {n} cop{'y' if n == 1 else 'ies'}")
        lines.append(f"  {name:<34}{g['us'] / 1e3:7.3f} ms = " + " + ".join(parts))
    for mode, c in res.get("compiled", {}).items():
        lines.append(f"torch.compile {mode}: library calls {c['extern']}, generated {c['kernels']}, compile "
                     f"{c['compile_s']:.1f} s, holds {c['memory_mib']['reserved']:+,.0f} MiB reserved once compiled")
        lines += [f"  {ln}" for ln in autotune_lines(c.get("autotune", [])) + c.get("inductor_log", [])]
    return lines


# ---------------------------------------------------------------------------------------------------------------------
# The exercise's reference against copy bandwidth and torch.compile.

RMS_SHAPES = ((8192, 8192), (65536, 1024))
COPY = "copy (same bytes)"
RMS_ORDER = (COPY, "reference (Triton)", "torch.compile max-autotune-no-cudagraphs", "torch.compile max-autotune",
             "torch eager")


def copy_fn(nbytes: int):
    """A function that copies ``nbytes // 2`` bytes into another buffer: ``nbytes`` moved (read and written), the
    memory ceiling for any kernel that must move ``nbytes``."""
    src = torch.empty(int(nbytes) // 2, dtype=torch.uint8, device=device.torch_device())
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def rmsnorm_point(rows: int, cols: int, rounds: int = 3) -> dict:
    """The exercise's reference kernel at ``rows x cols`` (bf16; fp16 on a T4) against a copy of the same bytes and
    ``torch.compile`` of the same torch function, in one interleaved run: ``ms`` and ``gbps`` of each,
    ``copy_fraction`` (each one's GB/s over the copy's), what the compiler generated and what one call of each
    compiled mode runs on the GPU (a CUDA graph's copies of new inputs show there)."""
    low = low_dtype(say=False)  # the caller prints the sentence once (bench.rmsnorm_bench)
    x, r = (torch.randn(rows, cols, device="cuda", dtype=low.torch) for _ in range(2))
    w = torch.randn(cols, device="cuda", dtype=low.torch)
    torch._dynamo.reset()  # once: both modes stay compiled (each is its own entry of dynamo's cache)
    with quiet_inductor():
        # max-autotune also replays a CUDA graph, which reads its inputs from fixed buffers: a call with new tensors
        # (as a benchmark's, or a model's first layer, makes) copies them in first. Without the graph, the same
        # search.
        g_nocg = generated(kernels.rmsnorm_residual_torch, x, r, w, 1e-6, reset=False,
                           mode="max-autotune-no-cudagraphs")
        g = generated(kernels.rmsnorm_residual_torch, x, r, w, 1e-6, reset=False, mode="max-autotune")
        tuned, nocg = g["fn"], g_nocg["fn"]
        for _ in range(2):
            tuned(x, r, w, 1e-6)
        nbytes = kernels.moved_bytes(x, r, w)
        fns = {COPY: copy_fn(nbytes),
               "reference (Triton)": lambda: kernels.fused_rmsnorm_residual(x, r, w, 1e-6),
               "torch.compile max-autotune-no-cudagraphs": lambda: nocg(x, r, w, 1e-6),
               "torch.compile max-autotune": lambda: tuned(x, r, w, 1e-6),
               "torch eager": lambda: kernels.rmsnorm_residual_torch(x, r, w, 1e-6)}
        res = timing.interleaved(fns, rounds=rounds, bytes=nbytes, flush_l2="read")
        runs = {"torch.compile max-autotune": gpu_ops(tuned, x, r, w, 1e-6),
                "torch.compile max-autotune-no-cudagraphs": gpu_ops(nocg, x, r, w, 1e-6)}
    gbps = {k: v.typical.gbps for k, v in res.items()}
    copy = gbps[COPY]
    return {"ms": {k: v.median_ms for k, v in res.items() if k != COPY}, "copy_ms": res[COPY].median_ms,
            "gbps": {k: v for k, v in gbps.items() if k != COPY}, "copy_gbps": copy,
            "copy_fraction": {k: v / copy for k, v in gbps.items() if k != COPY},
            "dtype": low.dtype, "compile_s": g["seconds"], "compile_s_no_cudagraphs": g_nocg["seconds"],
            "bytes": nbytes, "rounds": rounds,
            "compiled_kernels": [name for name, _ in g["kernels"]], "compiled_extern": g["extern"],
            "compiled_kernels_no_cudagraphs": [name for name, _ in g_nocg["kernels"]],
            "kernel_launches_per_call": runs}


def rmsnorm_lines(key: str, p: dict) -> list:
    """The lines the notebook prints for one :func:`rmsnorm_point`: each one's time, GB/s and share of the copy's
    GB/s (copy first), what one call of each compiled mode runs on the GPU, and the two ratios the lesson reads."""
    ref = p["ms"]["reference (Triton)"]
    lines = [f"{key} {dtypes.short(p.get('dtype', 'bfloat16'))}, {p['bytes'] / 2**20:,.0f} MiB moved a call: ms, "
             f"GB/s and share of the copy's GB/s, measured in the same run"]
    rows = [(COPY, p["copy_ms"], p["copy_gbps"], 1.0)] + [
        (n, p["ms"][n], p["gbps"][n], p["copy_fraction"][n]) for n in RMS_ORDER if n in p["ms"]]
    for name, ms, gb, frac in rows:
        lines.append(f"  {name:<42}{ms:7.3f} ms {gb:7,.0f} GB/s {frac:6.2f}")
    for mode, ops in p.get("kernel_launches_per_call", {}).items():
        if ops is not None:
            shown = {short_kernel(n) + (" (a copy)" if _is_copy(n) else ""): c for n, c in ops.items()}
            lines.append(f"  {mode}, what one call runs on the GPU: {shown}")
    gen = p["compiled_kernels"]
    nocg = p.get("compiled_kernels_no_cudagraphs", gen)
    lines.append(f"  generated: {nocg}" + ("" if nocg == gen else f" (with CUDA graphs: {gen})")
                 + "; reference / max-autotune-no-cudagraphs "
                 f"{p['ms']['torch.compile max-autotune-no-cudagraphs'] / ref:.2f}x; reference / max-autotune "
                 f"{p['ms']['torch.compile max-autotune'] / ref:.2f}x")
    return lines


@contextlib.contextmanager
def no_compile_threads():
    """Inductor compiles in one process (no worker pool): fewer processes on a small machine."""
    from torch._inductor import config

    old = config.compile_threads
    config.compile_threads = 1
    try:
        yield
    finally:
        config.compile_threads = old


# ---------------------------------------------------------------------------------------------------------------------
# A kernel of your own inside a compiled model.


def block_with_own_kernel():
    """A transformer block's seam written with the course's fused kernel as an operator
    (:func:`kernels.rmsnorm_residual_op`, registered here, before anything is compiled), and pointwise work after it
    for inductor to fuse: SiLU of the normalised rows, scaled. Returns the function."""
    op = kernels.rmsnorm_residual_op()

    def block(x, residual, weight):
        out, new_residual = op(x, residual, weight, 1e-6)
        return torch.nn.functional.silu(out) * 2.0, new_residual
    return block


def own_kernel_in_compile(x, residual, weight) -> dict:
    """Compile :func:`block_with_own_kernel` with ``fullgraph=True`` (an error if dynamo had to break the graph) and
    report what inductor wrote: the kernels it defines (the course's Triton kernel among them, under inductor's name
    for it), the library calls, whether the course's kernel is in the generated code, and the largest difference
    from the same block run eagerly."""
    block = block_with_own_kernel()
    with quiet_inductor():
        g = generated(block, x, residual, weight, fullgraph=True)
    eager = block(x, residual, weight)
    names = [name for name, _ in g["kernels"]]
    return {"kernels": names, "extern": g["extern"], "seconds": g["seconds"],
            "own_kernel_in_code": "_rmsnorm_residual_kernel" in g["code"],
            "max_abs_diff": max(float((a.float() - b.float()).abs().max()) for a, b in zip(g["out"], eager))}
