"""What Nsight Compute recorded on the course's H100 (``benchmarks/explore_compile09.py``, committed as
``benchmarks/results/h100-explore-compile09.json``): the lesson shows it, labelled, where counters cannot be read
here (CPU mode, or a GPU that refuses them: ERR_NVGPUCTRPERM)."""
from __future__ import annotations

from gpucourse import benchmarks

from . import measure

FILE = "h100-explore-compile09.json"

_COLUMNS = (("DRAM % of peak", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "{:.0f}"),
            ("achieved occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active", "{:.1f}"),
            ("theoretical occupancy %", "sm__maximum_warps_per_active_cycle_pct", "{:.1f}"),
            ("registers/thread", "launch__registers_per_thread", "{:.0f}"),
            ("MiB read", "dram__bytes_read.sum", "{:,.0f}"),
            ("MiB written", "dram__bytes_write.sum", "{:,.0f}"),
            ("ms", "gpu__time_duration.sum", "{:.3f}"),
            ("SM throughput % of peak", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "{:.0f}"),
            ("cycles with an instruction issued %", "smsp__issue_active.avg.pct_of_peak_sustained_active", "{:.0f}"),
            ("SM clock MHz", "smsp__cycles_elapsed.avg.per_second", "{:,.0f}"),
            ("memory clock MHz", "dram__cycles_elapsed.avg.per_second", "{:,.0f}"))


def load() -> dict:
    return benchmarks.recorded(FILE)


def _value(k: dict, key: str):
    v = k.get(key)
    if v is None:
        return None
    if key in (measure.SM_CLOCK, measure.DRAM_CLOCK):
        return measure.sm_clock_mhz(k, key)
    if key.startswith("dram__bytes"):
        return v / 2**20
    if key == "gpu__time_duration.sum":
        return v / 1e6  # ns -> ms
    return v


def show_ncu(kernel_rows: list) -> None:
    """One line per kernel: the figures the lesson reads."""
    for k in kernel_rows:
        print(f"  kernel {k['name'][:60]}")
        print("   " + "; ".join(f"{label} {fmt.format(_value(k, key))}" for label, key, fmt in _COLUMNS
                               if _value(k, key) is not None))


def show_recorded_ncu() -> dict:
    """Print the recorded ncu figures for the course's softmax (8192x8192 bf16) and the compiled sin chain."""
    doc = load()
    v = doc["versions"]
    print(f"recorded on an {v['gpu']} (torch {v['torch']}, triton {v['triton']}) with Nsight Compute, not measured "
          f"here ({FILE}):")
    for label, key in (("the course's softmax, 8192x8192 bf16", "ncu_softmax"),
                       ("torch.compile'd sin chain, 2^26 fp32", "ncu_sin_compiled")):
        print(label)
        show_ncu(doc[key]["kernels"])
    return doc


def clock_scaling(doc: dict | None = None) -> dict:
    """The recorded run timed the compiled sin chain's kernel twice: under Nsight Compute (``ncu_sin_compiled``,
    which ran it with the SM clock locked at the GPU's base clock, ncu's default) and with the course's timer at the
    clocks the GPU picks for itself (``fusion``, the compiled median). Returns both and their ratio."""
    doc = doc or load()
    ncu_ms = doc["ncu_sin_compiled"]["kernels"][0]["gpu__time_duration.sum"] / 1e6
    timed_ms = doc["fusion"]["sin chain, 2^26 fp32"]["compiled_ms"]
    return {"ncu_ms": ncu_ms, "timed_ms": timed_ms, "ratio": ncu_ms / timed_ms}


def show_clock_scaling() -> dict:
    c = clock_scaling()
    print(f"recorded ({FILE}): the compiled sin chain's kernel took {c['ncu_ms']:.3f} ms under Nsight Compute (SM "
          f"clock locked at base) and {c['timed_ms']:.3f} ms timed at the GPU's own clocks: {c['ratio']:.2f}x longer "
          f"at the lower clock")
    return c
