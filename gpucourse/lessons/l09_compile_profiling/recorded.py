"""What Nsight Compute recorded on the course's H100: the lesson shows it, labelled, where counters cannot be read here
(CPU mode, or a GPU that refuses them: ERR_NVGPUCTRPERM). The figures come from the lesson's curated file
``benchmarks/results/recorded/h100-l09_compile_profiling.json`` (:mod:`gpucourse.recorded`), read by its stable keys.

``python -m gpucourse.lessons.l09_compile_profiling.recorded promote`` writes that file from the lab's run: its
section at the end of this module is the only place that knows its file and labels.
"""
from __future__ import annotations

import os
import sys

from gpucourse import recorded as curated

from .profiling import DRAM_CLOCK, SM_CLOCK, sm_clock_mhz

LESSON = "l09_compile_profiling"

KEYS = {
    "ncu_softmax": "Nsight Compute's rows for the course's softmax, 8192x8192 bf16: [{name, <metric>: value}]",
    "ncu_sin_compiled": "Nsight Compute's rows for the torch.compile'd sin chain, 2^26 fp32 (SM clock locked at "
                        "base, ncu's default): [{name, <metric>: value}]",
    "sin_chain_compiled_ms": "the compiled sin chain's median time with the course's timer, at the GPU's own clocks",
}
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


def load() -> curated.Recorded:
    """The lesson's recorded H100 values, indexed by the keys of :data:`KEYS`."""
    return curated.load(LESSON)


def _file() -> str:
    return os.path.basename(curated.path_for(LESSON))


def _value(k: dict, key: str):
    v = k.get(key)
    if v is None:
        return None
    if key in (SM_CLOCK, DRAM_CLOCK):
        return sm_clock_mhz(k, key)
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


def show_recorded_ncu() -> curated.Recorded:
    """Print the recorded ncu figures for the course's softmax (8192x8192 bf16) and the compiled sin chain."""
    doc = load()
    env = doc.environment
    print(f"recorded on an {env['gpu']} (torch {env['torch']}, triton {env['triton']}) with Nsight Compute, not "
          f"measured here ({_file()}):")
    for label, key in (("the course's softmax, 8192x8192 bf16", "ncu_softmax"),
                       ("torch.compile'd sin chain, 2^26 fp32", "ncu_sin_compiled")):
        print(label)
        show_ncu(doc[key])
    return doc


def clock_scaling(doc: curated.Recorded | None = None) -> dict:
    """The recorded run timed the compiled sin chain's kernel twice: under Nsight Compute (``ncu_sin_compiled``,
    which ran it with the SM clock locked at the GPU's base clock, ncu's default) and with the course's timer at the
    clocks the GPU picks for itself (``sin_chain_compiled_ms``, the compiled median). Returns both and their ratio."""
    doc = doc or load()
    ncu_ms = doc["ncu_sin_compiled"][0]["gpu__time_duration.sum"] / 1e6
    timed_ms = doc["sin_chain_compiled_ms"]
    return {"ncu_ms": ncu_ms, "timed_ms": timed_ms, "ratio": ncu_ms / timed_ms}


def show_clock_scaling() -> dict:
    c = clock_scaling()
    print(f"recorded ({_file()}): the compiled sin chain's kernel took {c['ncu_ms']:.3f} ms under Nsight Compute (SM "
          f"clock locked at base) and {c['timed_ms']:.3f} ms timed at the GPU's own clocks: {c['ratio']:.2f}x longer "
          f"at the lower clock")
    return c


# ---------------------------------------------------------------------------------------------------------------------
# The promote step: the lab's run -> the curated file. The lab's labels appear here only.

SOURCE = "lab/results/h100-explore-compile09.json"


def promote_values(run: dict) -> dict:
    """The curated values from the lab run's document."""
    for key in ("ncu_softmax", "ncu_sin_compiled"):
        if not run[key]["ok"]:
            raise ValueError(f"{SOURCE}: {key} did not run: {run[key]['why']}")
    return {"ncu_softmax": run["ncu_softmax"]["kernels"], "ncu_sin_compiled": run["ncu_sin_compiled"]["kernels"],
            "sin_chain_compiled_ms": run["fusion"]["sin chain, 2^26 fp32"]["compiled_ms"]}


def promote() -> str:
    """Write the curated file from the lab's run; returns its path."""
    import json

    from gpucourse.workbooks import ROOT

    with open(os.path.join(ROOT, SOURCE)) as f:
        run = json.load(f)
    return curated.promote(LESSON, promote_values(run), KEYS, [curated.source(SOURCE)], run.get("versions"))


if __name__ == "__main__":
    if sys.argv[1:] != ["promote"]:
        sys.exit(f"usage: python -m gpucourse.lessons.{LESSON}.recorded promote")
    print(promote())
