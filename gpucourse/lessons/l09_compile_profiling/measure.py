"""What lesson 09's notebook measures: a small training step under the profiler, torch.compile's graphs and generated
code, the compile modes, proton and Nsight Compute on the course's kernels, and where fusion stops."""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch

from gpucourse import device, dtypes, timeline, timing
from gpucourse.progress import progress

from . import kernels, readtrace

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


def profile_with_schedule(model, opt, data, trace_dir: str, wait: int = 1, warmup: int = 1, active: int = 2) -> dict:
    """Train on ``data`` under ``torch.profiler.schedule(wait=..., warmup=..., active=..., repeat=1)``: the profiler
    idles for ``wait`` steps, records but discards ``warmup`` steps (its own start-up cost lands there), records
    ``active`` steps, and then hands the trace to ``on_trace_ready``: here ``tensorboard_trace_handler``, which writes
    it into ``trace_dir`` as a Chrome/Perfetto JSON file. ``prof.step()`` marks each step's end. Returns the steps
    run, the files written and the steps each file holds (its ``ProfilerStep#N`` ranges)."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    steps = wait + warmup + active + 1  # one more: the schedule is done, nothing is recorded there
    if len(data) < 1 or min(wait, warmup) < 0 or active < 1:
        raise ValueError(f"need data and wait, warmup >= 0, active >= 1 (got {len(data)} batches, {wait}, "
                         f"{warmup}, {active})")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.on_gpu() else [])
    with timeline.quiet_profiler(), profile(activities=acts,
                                            schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                                            on_trace_ready=tensorboard_trace_handler(trace_dir)) as prof:
        for i in range(steps):
            x, y = data[i % len(data)]
            train_step(model, opt, x, y)
            prof.step()
    files = sorted(f for f in os.listdir(trace_dir) if f.endswith(".json"))
    held = {}
    for f in files:
        names = {e["name"] for e in readtrace.load(os.path.join(trace_dir, f))}
        held[f] = sorted((n for n in names if n.startswith("ProfilerStep#")), key=lambda n: int(n.split("#")[1]))
    return {"steps": steps, "files": files, "steps_in_file": held}


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


def generated(fn, *args, reset: bool = True, **compile_kwargs) -> dict:
    """Compile ``fn`` with inductor, call it once on ``args``, and return what inductor wrote: the code, the names
    of its generated kernels (Triton on a GPU, C++ on the CPU), the library calls it kept (``extern_kernels.mm``...),
    the compile time (the first call) and the output. ``reset``: forget every earlier compilation first
    (``torch._dynamo.reset()``); ``False`` keeps them, so functions compiled before stay compiled (the same function
    compiled in another mode is a new entry of dynamo's cache: each mode is its own backend)."""
    from unittest import mock

    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(fn, **compile_kwargs)
    t0 = time.perf_counter()
    if reset:
        out, codes = run_and_get_code(compiled, *args)  # it resets dynamo (and the CUDA-graph trees) first
    else:  # the same, without its reset: what was compiled before stays compiled, graphs and all
        with mock.patch.object(torch._dynamo, "reset", lambda: None):
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


def cpu_vector_isa() -> dict:
    """The vector instruction set inductor's C++ uses on this machine's CPU, and how many float32 values one vector
    holds: {"isa": "avx512", "floats": 16}, {"isa": "avx2", "floats": 8}... ({"isa": None} where it uses none)."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:  # older torch kept it in codecache
        from torch._inductor.codecache import pick_vec_isa
    isa = pick_vec_isa()
    if not isa:
        return {"isa": None, "floats": 1}
    return {"isa": str(isa), "floats": int(isa.nelements(torch.float))}


def with_a_graph_break(x):
    """A function dynamo cannot trace in one graph: it prints a value computed from the tensor."""
    y = torch.sin(x) * 2
    print(f"  (inside the function: mean {float(y.mean()):.3f})")
    return torch.cos(y) + 1


def explain(fn, *args):
    """torch._dynamo.explain: how many graphs dynamo made and why it broke between them."""
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args)


def fullgraph_error(fn, *args) -> str | None:
    """Compile ``fn`` with ``fullgraph=True`` (one graph or nothing) and call it: the first line of the error dynamo
    raises at the first graph break, or None when the whole function is one graph. The ``eager`` backend runs the
    captured graph as it is (no code generation): the question is only whether dynamo can capture it."""
    torch._dynamo.reset()
    try:
        torch.compile(fn, fullgraph=True, backend="eager")(*args)
    except Exception as err:  # noqa: BLE001 - dynamo's error types and wording move between versions
        return _first_lines(err)
    finally:
        torch._dynamo.reset()
    return None


def _first_lines(err: Exception) -> str:
    """A dynamo error in brief: its type and first line, its "Explanation:" line where it has one, and the line of
    user code it stopped at (the line after "from user code:" and its File line)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    out = f"{type(err).__name__}: {(lines or [''])[0][:160]}"
    why = next((ln[len("Explanation:"):].strip() for ln in lines if ln.startswith("Explanation:")), None)
    if why:
        out += f" ({why[:160]})"
    if "from user code:" in lines:
        at = lines[lines.index("from user code:") + 1:][1:2]
        if at:
            out += f"\n    at: {at[0][:120]}"
    return out


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
# Inductor's own printing, kept out of the lesson's output, and what it says.


@contextlib.contextmanager
def quiet_inductor():
    """Inside the block, what inductor prints while it compiles and autotunes is captured instead of shown: its
    autotuning tables (written to stderr), its log records (a configuration that failed to compile, say) and Python
    warnings. Yields a dict that holds them after the block: ``stderr`` (text), ``log`` and ``warnings`` (lists of
    one-line strings). :func:`parse_autotune` reads the tables; :func:`inductor_log_lines` says what was kept."""
    captured = {"stderr": "", "log": [], "warnings": []}

    class _Keep(logging.Handler):
        def emit(self, record):
            captured["log"].append(f"{record.levelname} {record.name}: {record.getMessage().strip()}")

    keep = _Keep()
    swapped = []
    names = ["torch._inductor"] + sorted(n for n, lg in logging.Logger.manager.loggerDict.items()
                                         if n.startswith("torch._inductor.") and isinstance(lg, logging.Logger)
                                         and lg.handlers)
    for name in names:
        lg = logging.getLogger(name)
        swapped.append((lg, list(lg.handlers), lg.propagate))
        lg.handlers = [keep]
        lg.propagate = False
    buf = io.StringIO()
    catcher = warnings.catch_warnings(record=True)  # the filters stay as they are: what would show is recorded
    caught = catcher.__enter__()
    try:
        with contextlib.redirect_stderr(buf):
            yield captured
    finally:
        catcher.__exit__(None, None, None)
        for lg, handlers, propagate in swapped:
            lg.handlers = handlers
            lg.propagate = propagate
        captured["stderr"] = buf.getvalue()
        captured["warnings"] = [f"{w.category.__name__}: {(str(w.message).splitlines() or [''])[0][:200]}"
                                for w in caught]


_AUTOTUNE_HEAD = re.compile(r"^AUTOTUNE (\w+)\((.*)\)\s*$")
_AUTOTUNE_ROW = re.compile(r"^\s+(\S+) ([0-9.]+) ms ([0-9.]+)%\s*(.*)$")
_AUTOTUNE_TAIL = re.compile(r"AUTOTUNE benchmarking takes ([0-9.]+) seconds.*? for (\d+) choices")


def parse_autotune(text: str) -> list:
    """Inductor's autotuning tables (what ``max-autotune`` prints to stderr for each matmul it tunes) as data: one
    dict per tuned operation with ``op`` ("mm", "addmm"...), ``sizes``, ``choices`` (the rows it printed, fastest
    first: ``name``, ``ms``, ``pct`` of the fastest's speed, ``desc``), ``n_choices`` and ``seconds`` (how many it
    timed, and how long that took), ``best`` (the fastest) and ``best_triton`` (the fastest Triton template among
    the rows printed, None if none was). A choice whose name does not start with ``triton_`` is a library call
    (``mm``/``addmm``: cuBLAS on an NVIDIA GPU)."""
    out, cur = [], None
    for line in text.splitlines():
        m = _AUTOTUNE_HEAD.match(line)
        if m:
            cur = {"op": m.group(1), "sizes": m.group(2), "choices": [], "n_choices": None, "seconds": None}
            out.append(cur)
            continue
        if cur is None:
            continue
        m = _AUTOTUNE_ROW.match(line)
        if m:
            cur["choices"].append({"name": m.group(1), "ms": float(m.group(2)), "pct": float(m.group(3)),
                                   "desc": m.group(4).strip()})
            continue
        m = _AUTOTUNE_TAIL.search(line)
        if m:
            cur["seconds"], cur["n_choices"] = float(m.group(1)), int(m.group(2))
            cur = None
    for r in out:
        r["best"] = r["choices"][0] if r["choices"] else None
        r["best_triton"] = next((c for c in r["choices"] if c["name"].startswith("triton_")), None)
    return out


def autotune_lines(entries: list) -> list:
    """One line per tuned operation: what the search timed and what won, the best Triton template against the best
    library call (cuBLAS) where both were printed."""
    lines = []
    for r in entries:
        best, tri = r["best"], r["best_triton"]
        if best is None:
            continue
        lib = next((c for c in r["choices"] if not c["name"].startswith("triton_")), None)
        head = (f"autotuned {r['op']}({r['sizes']}): {r['n_choices'] or len(r['choices'])} choices timed"
                + (f" in {r['seconds']:.1f} s" if r["seconds"] is not None else "") + f"; fastest {best['name']} "
                f"{best['ms']:.4f} ms")
        if lib is not None and tri is not None:
            head += (f"; best Triton template {tri['name']} {tri['ms']:.4f} ms against the library's {lib['name']} "
                     f"{lib['ms']:.4f} ms ({lib['ms'] / tri['ms']:.0%} of its speed)")
        lines.append(head)
    return lines


def inductor_log_lines(captured: dict) -> list:
    """What :func:`quiet_inductor` kept apart from the autotuning tables and warnings, in one line: its log records
    by level (an autotuning choice that fails to compile, asking for more shared memory than an SM has, is logged
    as an error and skipped). The warnings stay in ``captured``, unprinted."""
    levels: dict = {}
    for rec in captured["log"]:
        lvl = rec.split(" ", 1)[0].lower()
        levels[lvl] = levels.get(lvl, 0) + 1
    if not levels:
        return []
    resources = sum("out of resource" in rec for rec in captured["log"])
    return ["inductor's log: " + ", ".join(f"{n} {lvl} record{'s' if n > 1 else ''}" for lvl, n in
                                           sorted(levels.items()))
            + (f" ({resources} about a configuration that needs more shared memory than an SM has: skipped)"
               if resources else "")]


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
               "launch__registers_per_thread", "sm__maximum_warps_per_active_cycle_pct",
               # what the SMs did, beside how many warps they held: their busiest unit's throughput as a share of
               # its peak, the share of cycles in which a scheduler issued an instruction, and the SM clock the
               # kernel ran at (ncu locks it at the GPU's base clock unless told otherwise: --clock-control)
               "sm__throughput.avg.pct_of_peak_sustained_elapsed", "smsp__issue_active.avg.pct_of_peak_sustained_active",
               "smsp__cycles_elapsed.avg.per_second", "dram__cycles_elapsed.avg.per_second")
SM_CLOCK = "smsp__cycles_elapsed.avg.per_second"
DRAM_CLOCK = "dram__cycles_elapsed.avg.per_second"
_TO_MHZ = {"cycle/second": 1e-6, "cycle/msecond": 1e-3, "cycle/usecond": 1.0, "cycle/nsecond": 1e3,
           "hz": 1e-6, "khz": 1e-3, "mhz": 1.0, "ghz": 1e3}


def sm_clock_mhz(kernel: dict, metric: str = SM_CLOCK) -> float | None:
    """The SM clock (MHz) an ncu kernel row ran at, from its ``smsp__cycles_elapsed.avg.per_second`` and that
    metric's unit (ncu scales units: cycle/nsecond, cycle/second...); ``metric=DRAM_CLOCK`` for the memory's clock.
    None where the row lacks it."""
    v = kernel.get(metric)
    unit = (kernel.get("units") or {}).get(metric, "").strip().lower()
    if v is None or unit not in _TO_MHZ:
        return None
    return v * _TO_MHZ[unit]


def max_clocks_mhz() -> dict | None:
    """This GPU's highest SM and memory clocks, as ``nvidia-smi --query-gpu=clocks.max.sm,clocks.max.memory``
    reports them ({"sm": MHz, "memory": MHz}); None without nvidia-smi or where it does not answer."""
    from gpucourse import nvidia_smi

    out = nvidia_smi.run("--query-gpu=clocks.max.sm,clocks.max.memory", "--format=csv,noheader,nounits")
    try:
        sm, mem = (float(v) for v in (out or "").strip().splitlines()[0].split(","))
    except (IndexError, ValueError):
        return None
    return {"sm": sm, "memory": mem}


def ncu_clock_lines(kernel: dict, timed_ms: float, max_clocks: dict | None) -> list:
    """What an ncu row says about the SMs beside the memory, for a kernel also timed at the GPU's own clocks
    (``timed_ms``): the SM counters, and its ncu time against the timed one next to the ratio of the clocks (ncu
    locks the clocks; a kernel whose time follows the SM clock is limited by the SMs, not by DRAM)."""
    lines = []
    parts = [f"{label} {kernel[key]:.0f}%" for label, key in (
        ("DRAM throughput", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        ("SM throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        ("cycles with an instruction issued", "smsp__issue_active.avg.pct_of_peak_sustained_active"))
        if kernel.get(key) is not None]
    if parts:
        lines.append("  counters (% of peak): " + "; ".join(parts))
    ncu_ms = (kernel.get("gpu__time_duration.sum") or 0) / 1e6
    sm, mem = sm_clock_mhz(kernel), sm_clock_mhz(kernel, DRAM_CLOCK)
    if ncu_ms and timed_ms:
        line = f"  time: {ncu_ms:.3f} ms under ncu against {timed_ms:.3f} ms timed: {ncu_ms / timed_ms:.2f}x"
        if sm:
            line += f"; clocks under ncu: SM {sm:,.0f} MHz" + (f", memory {mem:,.0f} MHz" if mem else "")
        if sm and max_clocks:
            line += (f"; this GPU's max (nvidia-smi): SM {max_clocks['sm']:,.0f} MHz ({max_clocks['sm'] / sm:.2f}x "
                     f"ncu's), memory {max_clocks['memory']:,.0f} MHz")
        lines.append(line)
    return lines


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
    has_units = len(reader) > 2 and reader[1] and not reader[1][0].isdigit()
    head, rows = reader[0], reader[2:] if has_units else reader[1:]
    units = dict(zip(head, reader[1])) if has_units else {}
    out = []
    for r in rows:
        d = dict(zip(head, r))
        k = {"name": d.get("Kernel Name", "?"), "units": {m: units[m] for m in NCU_METRICS if units.get(m)}}
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
