"""Lesson 09's registered benchmarks. The notebook runs them (through ``benchmarks.run_in_child``: torch.compile's
code runs in a child process, so a crash there cannot take the notebook's kernel with it) and records each result;
``gpucourse bench`` runs the same functions on its own. Every ratio is measured within one run.
"""
from __future__ import annotations

from gpucourse import dtypes
from gpucourse.benchmarks import register, target
from gpucourse.progress import progress

from . import measure


def rmsnorm_targets(res: dict) -> list:
    """Per shape: the reference's GB/s against a copy of the same bytes timed in the same run (the ceiling for a
    kernel that must read x and residual and write two outputs: at least 0.85 of it), and its speed against
    torch.compile(mode="max-autotune-no-cudagraphs") of the same function, which reaches the same ceiling: a tie is
    the expected result, so the target only asks not to lose by more than 10%. max-autotune with CUDA graphs is
    printed beside them but sets no target: its time includes the graph's copies of new inputs."""
    out = []
    for key, p in res["points"].items():
        ours = p["ms"]["reference (Triton)"]
        low = dtypes.short(p.get("dtype", "bfloat16"))  # fp16 on a GPU without bf16 (a T4)
        out.append(target(f"fused_rmsnorm_residual {key} {low}: reference / copy bandwidth (same run)",
                          p["gbps"]["reference (Triton)"] / p["copy_gbps"], 0.85))
        out.append(target(f"fused_rmsnorm_residual {key} {low}: reference / torch.compile "
                          f"max-autotune-no-cudagraphs (speed)",
                          p["ms"]["torch.compile max-autotune-no-cudagraphs"] / ours, 0.9))
    return out


@register("compile09_rmsnorm", targets=rmsnorm_targets)
def rmsnorm_bench() -> dict:
    """The exercise's reference kernel against a copy of the same bytes, torch.compile of the same torch function
    (max-autotune without and with CUDA graphs) and eager torch, in one interleaved run, at 8192x8192 and
    65536x1024 bf16 (fp16 on a T4, and it says so)."""
    measure.low_dtype()  # prints why when the GPU has no bf16
    return {"points": {f"{r}x{c}": measure.rmsnorm_point(r, c)
                       for r, c in progress(measure.RMS_SHAPES, "RMSNorm shapes (compiling max-autotune)")}}


def fusion_targets(res: dict) -> list:
    out = []
    ncu = res.get("ncu_sin_chain_compiled") or {}
    if ncu.get("ok"):
        k = ncu["kernels"]
        moved = sum(x["dram__bytes_read.sum"] + x["dram__bytes_write.sum"] for x in k)
        out.append(target("compiled sin chain (2^26 fp32): DRAM bytes moved (ncu) / ideal (read once, write once)",
                          moved / res["points"]["sin chain, 2^26 fp32"]["ideal_bytes"], 1.2, "<="))
    return out


@register("compile09_fusion", targets=fusion_targets)
def fusion_bench() -> dict:
    """Eager against torch.compile for the sin chain and LayerNorm+scale+GELU (kernel counts, compile time,
    medians), and Nsight Compute's DRAM bytes for the compiled and the eager sin chain where counters are readable."""
    return {"points": measure.fusion_examples(), "ncu_sin_chain_compiled": measure.ncu("sin_chain_compiled"),
            "ncu_sin_chain_eager": measure.ncu("sin_chain_eager")}


@register("compile09_modes")
def modes_bench() -> dict:
    """A launch-bound MLP forward eagerly and under torch.compile's default, reduce-overhead and max-autotune
    modes: per forward, the host's time by CUDA events, the wall clock over many calls and the GPU's kernel time
    from the profiler; compile time and the memory each mode holds."""
    return measure.compile_modes()


@register("compile09_epilogue")
def epilogue_bench() -> dict:
    """gelu(a @ b + bias) at 8192^3 bf16: eager, torch.compile default, max-autotune and max-autotune-no-cudagraphs
    (what each generated, the memory it holds), the hand-fused Triton kernel with the epilogue, and the matmul
    alone; five interleaved rounds, and each one's GPU time per call by kernel."""
    return measure.epilogue_timings()
