"""What Nsight Compute recorded on the course's H100 (``benchmarks/explore_compile09.py``, committed as
``benchmarks/results/h100-explore-compile09.json``): the lesson shows it, labelled, where counters cannot be read
here (CPU mode, or a GPU that refuses them: ERR_NVGPUCTRPERM)."""
from __future__ import annotations

from gpucourse import benchmarks

FILE = "h100-explore-compile09.json"

_COLUMNS = (("DRAM % of peak", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "{:.0f}"),
            ("achieved occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active", "{:.1f}"),
            ("theoretical occupancy %", "sm__maximum_warps_per_active_cycle_pct", "{:.1f}"),
            ("registers/thread", "launch__registers_per_thread", "{:.0f}"),
            ("MiB read", "dram__bytes_read.sum", "{:,.0f}"),
            ("MiB written", "dram__bytes_write.sum", "{:,.0f}"),
            ("ms", "gpu__time_duration.sum", "{:.3f}"))


def load() -> dict:
    return benchmarks.recorded(FILE)


def _value(k: dict, key: str):
    v = k.get(key)
    if v is None:
        return None
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
