"""What lesson 09's notebook measures: a small training step under the profiler, torch.compile's graphs and generated
code, the compile modes, proton and Nsight Compute on the course's kernels, and where fusion stops."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import torch

from gpucourse import device, dtypes, timeline, timing
from gpucourse.progress import progress

from . import kernels

# ---------------------------------------------------------------------------------------------------------------------
# 1. The profiler on a small model's training step.


def small_model(width: int | None = None, depth: int = 2):
    """A small MLP block stack (LayerNorm, Linear, GELU, Linear, residual) with AdamW: enough kinds of kernels for
    a profile to be worth reading."""
    width = width or device.size(cpu=64, gpu=1024)
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.LayerNorm(width), torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                   torch.nn.Linear(4 * width, width)]
    model = torch.nn.Sequential(*layers).to(device.torch_device())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt


def batches(n: int, width: int | None = None, rows: int | None = None):
    """``n`` batches (x, y) on the host, as a data loader hands them out."""
    width = width or device.size(cpu=64, gpu=1024)
    rows = rows or device.size(cpu=32, gpu=4096)
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)) for _ in range(n)]


def train_step(model, opt, x, y) -> float:
    """One training step as it is often written: copy the batch, forward, loss, backward, step, and read the loss
    on the host for logging (``loss.item()``: the host waits for the GPU here)."""
    dev = device.torch_device()
    x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()  # the sync: the host waits for every kernel queued so far


def profile_steps(model, opt, data, trace_path: str | None = None):
    """Profile the training steps over ``data`` (CPU activity, and CUDA on a GPU); the profiler object, its trace
    written to ``trace_path`` (Chrome/Perfetto JSON) when given."""
    from torch.profiler import ProfilerActivity, profile

    train_step(model, opt, *data[0])  # warm-up: first-call costs are not the step's
    if device.on_gpu():
        torch.cuda.synchronize()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.on_gpu() else [])
    with timeline.quiet_profiler(), profile(activities=acts) as prof:
        for x, y in data:
            train_step(model, opt, x, y)
    if trace_path:
        prof.export_chrome_trace(trace_path)
    return prof


def top_table(prof, n: int = 8) -> str:
    """The profiler's kernel table, sorted by GPU time on a GPU (by CPU time in CPU mode)."""
    key = "self_cuda_time_total" if device.on_gpu() else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=n, max_name_column_width=60)


# ---------------------------------------------------------------------------------------------------------------------
# 2. torch.compile: graphs, generated code, kernel counts.


def sin_chain(x):
    """Four chained elementwise ops: eagerly four kernels, each reading and writing the whole tensor."""
    return torch.sin(torch.sin(torch.sin(torch.sin(x))))


def ln_scale_gelu(x, weight, bias):
    """LayerNorm, a scale and GELU: a reduction (mean, variance per row), then elementwise work on every element."""
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias)
    return torch.nn.functional.gelu(y * 1.5)


_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(triton|cpp_pybinding|cpp)\(", re.M)
_EXTERN = re.compile(r"extern_kernels\.(\w+)\(")


def generated(fn, *args, **compile_kwargs) -> dict:
    """Compile ``fn`` with inductor, call it once on ``args``, and return what inductor wrote: the code, the names
    of its generated kernels (Triton on a GPU, C++ on the CPU), the library calls it kept (``extern_kernels.mm``...),
    the compile time (the first call) and the output."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(fn, **compile_kwargs)
    t0 = time.perf_counter()
    out, codes = run_and_get_code(compiled, *args)
    seconds = time.perf_counter() - t0
    code = "\n".join(codes)
    return {"code": code, "kernels": _KERNEL_DEF.findall(code), "extern": sorted(set(_EXTERN.findall(code))),
            "seconds": seconds, "out": out, "fn": compiled}


def kernel_source(code: str, name: str, max_lines: int = 40) -> str:
    """The source of one generated kernel (the text from its definition to the next blank line pair)."""
    start = code.find(f"{name} = async_compile.")
    if start < 0:
        return ""
    end = code.find("''', device_str=", start)
    end = code.find("''')", start) if end < 0 else end
    lines = code[start:end if end > 0 else None].splitlines()
    lines = [ln for ln in lines if ln.strip()]
    return "\n".join(lines[:max_lines]) + ("\n    ..." if len(lines) > max_lines else "")


def gpu_ops(fn, *args) -> dict | None:
    """What one call of ``fn`` runs on the GPU, from the profiler: each kernel's (and copy's, memset's) name and how
    many times; None in CPU mode. A CUDA graph's copies of new inputs into its own buffers show here too."""
    if not device.on_gpu():
        return None
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with timeline.quiet_profiler(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    ops: dict = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            ops[e.name] = ops.get(e.name, 0) + 1
    return ops


def gpu_kernel_count(fn, *args) -> int | None:
    """How many GPU kernels one call of ``fn`` launches (copies and memsets aside); None in CPU mode."""
    ops = gpu_ops(fn, *args)
    return None if ops is None else sum(n for name, n in ops.items() if not name.startswith(("Memcpy", "Memset")))


def eager_op_count(fn, *args) -> int:
    """How many aten compute ops one eager call runs (each one kernel on a GPU, a pass over memory each)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, a=(), kw=None):
            if not str(func).startswith(("aten.view", "aten._unsafe_view", "aten.detach", "aten.empty")):
                Count.n += 1
            return func(*a, **(kw or {}))

    with Count():
        fn(*args)
    return Count.n


def with_a_graph_break(x):
    """A function dynamo cannot trace in one graph: it prints a value computed from the tensor."""
    y = torch.sin(x) * 2
    print(f"  (inside the function: mean {float(y.mean()):.3f})")
    return torch.cos(y) + 1


def explain(fn, *args):
    """torch._dynamo.explain: how many graphs dynamo made and why it broke between them."""
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args)


def count_compiles(fn, shapes, dynamic=None) -> list:
    """Call ``torch.compile(fn)`` on inputs of each shape in turn; for each call, how many graphs had been compiled
    so far. A counting backend stands in for inductor (no code generation): what is counted is dynamo's decision to
    compile again (a recompilation), which is the same whatever the backend."""
    compiled = []

    def backend(gm, example_inputs):
        compiled.append([tuple(getattr(t, "shape", ())) for t in example_inputs])
        return gm.forward

    torch._dynamo.reset()
    f = torch.compile(fn, backend=backend, dynamic=dynamic)
    counts = []
    for shape in shapes:
        f(torch.randn(*shape))
        counts.append(len(compiled))
    torch._dynamo.reset()
    return counts


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


def compile_modes(rounds: int = 3) -> dict:
    """A launch-bound forward (a 6-layer MLP at batch 8: a dozen tiny kernels) eagerly and under each compile mode:
    default (fusion), reduce-overhead (fusion + CUDA graphs: one replay instead of a launch per kernel) and
    max-autotune (also tries Triton templates for the matmuls). Each mode's compile time (first call) and median."""
    model = small_mlp()
    x = torch.randn(8, 512, device="cuda", dtype=low_dtype().torch)
    res = {"eager": {"compile_s": 0.0}}
    fns = {"eager": lambda: model(x)}
    with torch.no_grad():
        for mode in progress(("default", "reduce-overhead", "max-autotune"), "compiling each mode",
                             label=lambda m: m):
            torch._dynamo.reset()
            f = torch.compile(model, mode=None if mode == "default" else mode)
            t0 = time.perf_counter()
            for _ in range(3):  # CUDA graphs are recorded on the third call
                f(x)
            torch.cuda.synchronize()
            res[mode] = {"compile_s": time.perf_counter() - t0}
            fns[mode] = (lambda f=f: f(x))
        # the compiled modules are kept in fns: dynamo's cache holds one entry per mode (reset only before compiling)
        ms = _ms(fns, rounds=rounds, flush_l2=False)
    for k in res:
        res[k]["ms"] = ms[k]
        res[k]["speedup"] = ms["eager"] / ms[k]
    return res


# ---------------------------------------------------------------------------------------------------------------------
# 3. proton on the course's kernels.


def proton_tree(path_base: str) -> dict:
    """Run the course's matmul (with its epilogue) and softmax under proton, and return the profile as a tree:
    {name: {"time_ms":..., "calls":..., "children": {...}}} read from proton's hatchet file."""
    import triton.profiler as proton

    low = low_dtype().torch
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=low) for _ in range(2))
    bias = torch.randn(4096, device="cuda", dtype=low)
    x = torch.randn(8192, 8192, device="cuda", dtype=low)
    kernels.matmul_bias_gelu(a, b, bias)
    kernels.softmax(x)
    torch.cuda.synchronize()
    sid = proton.start(path_base, hook="triton")
    for _ in range(10):
        with proton.scope("matmul + bias + GELU (one kernel)"):
            kernels.matmul_bias_gelu(a, b, bias)
        with proton.scope("softmax"):
            kernels.softmax(x)
        with proton.scope("torch: matmul, then bias + GELU"):
            kernels.bias_gelu_torch(a, b, bias)
    proton.finalize(sid)
    with open(path_base + ".hatchet") as f:
        doc = json.load(f)
    return _tree(doc[0] if isinstance(doc, list) else doc)


def proton_tree_child(path_base: str, timeout: int = 240) -> dict:
    """:func:`proton_tree` in a child process. Proton and torch.profiler both subscribe to CUPTI, which takes one
    subscriber per process: after torch.profiler has run in a process, proton.start there fails
    (cuptiSubscribe error 39, CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)."""
    code = ("import json, sys, gpucourse\n"
            "from gpucourse.lessons.l09_compile_profiling import measure\n"
            "json.dump(measure.proton_tree(sys.argv[1]), open(sys.argv[1] + '.tree.json', 'w'))\n")
    p = subprocess.run([sys.executable, "-c", code, path_base], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"proton in a child process failed ({p.returncode}): {(p.stdout + p.stderr)[-800:]}")
    with open(path_base + ".tree.json") as f:
        return json.load(f)


def _tree(node) -> dict:
    out = {}
    for child in node.get("children", []):
        name = child.get("frame", {}).get("name", "?")
        m = child.get("metrics", {})
        out[name] = {"time_ms": m.get("time (ns)", 0) / 1e6, "calls": m.get("count", 0),
                     "children": _tree(child)}
    return out


def inclusive_ms(node: dict) -> float:
    """A node's time with its children's: proton records kernel time at the kernels (the leaves); a scope's own
    entry may hold none."""
    return max(node["time_ms"], sum(inclusive_ms(c) for c in node["children"].values()))


def print_tree(tree: dict, depth: int = 0, total: float | None = None) -> None:
    """One line per node, children indented under their scope: time (with children), share of the whole, calls."""
    total = total or sum(inclusive_ms(v) for v in tree.values()) or 1.0
    for name, v in sorted(tree.items(), key=lambda kv: -inclusive_ms(kv[1])):
        ms = inclusive_ms(v)
        calls = f"{v['calls']:>4}x" if v["calls"] else "     "
        print(f"{'  ' * depth}{ms:9.3f} ms {100 * ms / total:5.1f}%  {calls}  {name[:70]}")
        print_tree(v["children"], depth + 1, total)


# ---------------------------------------------------------------------------------------------------------------------
# 4. Nsight Compute.

NCU_METRICS = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.pct_of_peak_sustained_active",
               "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
               "launch__registers_per_thread", "sm__maximum_warps_per_active_cycle_pct")


def ncu(target: str, kernel_regex: str | None = None, timeout: int = 180) -> dict:
    """Run ``benchmarks/ncu_target09.py <target>`` under Nsight Compute (the kernels in its "measured" NVTX range)
    and return {"ok": bool, "why": str, "kernels": [{name, metric: value}]}. ``ok`` is False when ncu is missing or
    the GPU does not let this user read its counters (ERR_NVGPUCTRPERM)."""
    from gpucourse.workbooks import ROOT

    exe = shutil.which("ncu")
    if exe is None:
        return {"ok": False, "why": "ncu (Nsight Compute) is not installed here", "kernels": []}
    cmd = [exe, "--csv", "--page", "raw", "--metrics", ",".join(NCU_METRICS), "--nvtx", "--nvtx-include",
           "measured/", *(["--kernel-name", f"regex:{kernel_regex}"] if kernel_regex else []),
           sys.executable, os.path.join(ROOT, "benchmarks", "ncu_target09.py"), target]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"ncu took over {timeout} s", "kernels": []}
    text = p.stdout + p.stderr
    if "ERR_NVGPUCTRPERM" in text:
        return {"ok": False, "why": "ERR_NVGPUCTRPERM: this GPU does not let this user read its performance counters",
                "kernels": []}
    rows = _ncu_csv(p.stdout)
    if not rows:
        return {"ok": False, "why": f"ncu returned {p.returncode} and no kernel rows: {text.strip()[-300:]}",
                "kernels": []}
    return {"ok": True, "why": "", "kernels": rows}


def _ncu_csv(text: str) -> list:
    import csv
    import io

    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 2:
        return []
    reader = list(csv.reader(io.StringIO("\n".join(lines))))
    head, rows = reader[0], reader[2:] if len(reader) > 2 and reader[1] and not reader[1][0].isdigit() else reader[1:]
    out = []
    for r in rows:
        d = dict(zip(head, r))
        k = {"name": d.get("Kernel Name", "?")}
        for m in NCU_METRICS:
            try:
                k[m] = float(str(d[m]).replace(",", "")) if m in d else None
            except ValueError:
                k[m] = None
        out.append(k)
    return out


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


def epilogue_timings(rounds: int = 2) -> dict:
    """gelu(a @ b + bias) at 8192^3 bf16: torch eager (cuBLAS, then two passes), torch.compile default (cuBLAS + one
    fused pointwise kernel), max-autotune (Triton templates with the epilogue fused, if one wins), the course's
    hand-fused Triton kernel, and the plain matmul alone (the floor for any fusion)."""
    a, b, bias = epilogue_inputs()
    fns = {"torch eager": lambda: kernels.bias_gelu_torch(a, b, bias), "matmul alone (cuBLAS)": lambda: a @ b,
           "hand-fused Triton (epilogue)": lambda: kernels.matmul_bias_gelu(a, b, bias)}
    info = {}
    for mode in progress(("default", "max-autotune"), "compiling the epilogue", label=lambda m: m):
        torch._dynamo.reset()
        g = generated(kernels.bias_gelu_torch, a, b, bias, mode=None if mode == "default" else mode)
        info[mode] = {"kernels": [k for k, _ in g["kernels"]], "extern": g["extern"], "compile_s": g["seconds"]}
        f = torch.compile(kernels.bias_gelu_torch, mode=None if mode == "default" else mode)
        f(a, b, bias)
        fns[f"torch.compile {mode}"] = (lambda f=f: f(a, b, bias))
    timing.settle(lambda: a @ b, seconds=1.0)
    ms = _ms(fns, rounds=rounds, flops=2 * a.shape[0] * a.shape[1] * b.shape[1], dtype=a.dtype, rep_ms=100)
    return {"ms": ms, "compiled": info}


# ---------------------------------------------------------------------------------------------------------------------
# The exercise's reference against torch.compile(max-autotune) and copy bandwidth.

RMS_SHAPES = ((8192, 8192), (65536, 1024))


def rmsnorm_point(rows: int, cols: int, rounds: int = 3) -> dict:
    low = low_dtype(say=False)  # the caller prints the sentence once (bench.rmsnorm_bench)
    x, r = (torch.randn(rows, cols, device="cuda", dtype=low.torch) for _ in range(2))
    w = torch.randn(cols, device="cuda", dtype=low.torch)
    # max-autotune also replays a CUDA graph, which reads its inputs from fixed buffers: a call with new tensors
    # (as a benchmark's, or a model's first layer, makes) copies them in first. Without the graph, the same search.
    g_nocg = generated(kernels.rmsnorm_residual_torch, x, r, w, 1e-6, mode="max-autotune-no-cudagraphs")
    nocg = g_nocg["fn"]
    g = generated(kernels.rmsnorm_residual_torch, x, r, w, 1e-6, mode="max-autotune")
    tuned, compile_s = g["fn"], g["seconds"]
    nbytes = kernels.moved_bytes(x, r, w)
    res = timing.interleaved({"reference (Triton)": lambda: kernels.fused_rmsnorm_residual(x, r, w, 1e-6),
                              "torch.compile max-autotune": lambda: tuned(x, r, w, 1e-6),
                              "torch.compile max-autotune-no-cudagraphs": lambda: nocg(x, r, w, 1e-6),
                              "torch eager": lambda: kernels.rmsnorm_residual_torch(x, r, w, 1e-6)},
                             rounds=rounds, bytes=nbytes, flush_l2="read")
    copy = timing.copy_gbps(nbytes // 2, flush_l2="read")
    return {"ms": {k: v.median_ms for k, v in res.items()}, "gbps": {k: v.typical.gbps for k, v in res.items()},
            "dtype": low.dtype, "copy_gbps": copy, "compile_s": compile_s, "bytes": nbytes,
            "compiled_kernels": [name for name, _ in g["kernels"]], "compiled_extern": g["extern"],
            "compiled_kernels_no_cudagraphs": [name for name, _ in g_nocg["kernels"]],
            "kernel_launches_per_call": {"torch.compile max-autotune": gpu_ops(tuned, x, r, w, 1e-6),
                                         "torch.compile max-autotune-no-cudagraphs": gpu_ops(nocg, x, r, w, 1e-6)}}


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
