"""Lesson 09's profilers at work: torch.profiler on a small model's training step, proton on the course's
Triton kernels, and Nsight Compute's counters (with the clocks a kernel ran at)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from gpucourse import device, timeline
from gpucourse import ncu as ncu_kit

from . import kernels, readtrace
from .modes import low_dtype


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
            "from gpucourse.lessons.l09_compile_profiling import profiling\n"
            "json.dump(profiling.proton_tree(sys.argv[1]), open(sys.argv[1] + '.tree.json', 'w'))\n")
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

NCU_METRICS = ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__warps_active.avg.pct_of_peak_sustained_active", "dram__bytes_read.sum", "dram__bytes_write.sum",
               "gpu__time_duration.sum",
               "launch__registers_per_thread", "sm__maximum_warps_per_active_cycle_pct",
               # what the SMs did, beside how many warps they held: their busiest unit's throughput as a share of
               # its peak, the share of cycles in which a scheduler issued an instruction, and the SM clock the
               # kernel ran at (ncu locks it at the GPU's base clock unless told otherwise: --clock-control)
               "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "smsp__issue_active.avg.pct_of_peak_sustained_active",
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
    """Run ``python -m gpucourse.lessons.l09_compile_profiling.ncu_target <target>`` under Nsight Compute (the
    kernels in its "measured" NVTX range) and return {"ok": bool, "why": str, "kernels": [{name, metric: value}]}.
    ``ok`` is False when ncu is missing or the GPU does not let this user read its counters (ERR_NVGPUCTRPERM)."""
    return ncu_kit.run([sys.executable, "-m", "gpucourse.lessons.l09_compile_profiling.ncu_target", target],
                       metrics=NCU_METRICS, timeout=timeout, keep=NCU_METRICS,
                       extra=("--nvtx", "--nvtx-include", "measured/",
                              *(["--kernel-name", f"regex:{kernel_regex}"] if kernel_regex else [])))


def _ncu_csv(text: str) -> list:
    """ncu's raw-page CSV rows with lesson 09's metrics (gpucourse.ncu.parse_csv)."""
    return ncu_kit.parse_csv(text, NCU_METRICS)
