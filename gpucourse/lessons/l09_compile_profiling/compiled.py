"""What torch.compile makes of a function: its graphs and graph breaks, the code inductor generates, kernel
counts, recompiles per shape, and inductor's own printing (autotuning tables, log records) kept out of the lesson's
output."""
from __future__ import annotations

import contextlib
import io
import logging
import re
import time
import warnings

import torch

from gpucourse import device, timeline


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
