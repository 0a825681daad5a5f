"""`gpucourse doctor`: what this machine is, what the course can do on it, and what to fix."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from . import cuda_build, device, dtypes, env, lessons, nvidia_smi, specs

# Why a lesson that needs each of these is limited here (lessons declare their needs in LESSON.needs).
NEEDS_WHY = {
    "gpu": "no CUDA GPU: CPU mode",
    "triton": "Triton is not installed: Triton kernels cannot run",
    "nvcc": "nvcc not found: CUDA sources cannot be compiled (install the CUDA toolkit)",
    "ninja": "ninja not found: torch.utils.cpp_extension cannot build (pip install ninja)",
    "bf16": "no bf16 tensor cores (needs sm80+): bf16 parts run emulated/slow or are skipped",
    "tf32": "no TF32 tensor cores (needs sm80+): the TF32 comparison is skipped",
    "fp8": "no fp8 tensor cores (needs sm89+): the FP8 section is skipped",
}


def tool_version(name: str, path: str | None = None) -> str | None:
    """First line that names a version in ``name --version`` (``path``: where the tool is, default: found on PATH),
    or None when the tool is not there."""
    path = path or shutil.which(name)
    if not path:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return f"found at {path} (version unknown)"
    text = (out.stdout + out.stderr).strip()
    m = re.search(r"release (\d+\.\d+)", text)  # nvcc: "Cuda compilation tools, release 13.0, V13.0.48"
    if m:
        return m.group(1)
    return text.splitlines()[-1].strip() if text else f"found at {path}"


def facts() -> dict:
    """Everything the doctor's report and its warnings are computed from (JSON-serialisable)."""
    import torch

    v = env.versions()
    p = device.props()
    caps = device.capabilities(p)
    spec = specs.lookup(p.name) if p else None
    f = dict(v)
    f.update({
        "colab": device.in_colab(),
        "nvcc": tool_version("nvcc", cuda_build.nvcc_path()),  # where the CUDA lesson will look for it
        "ninja": tool_version("ninja"),
        "nvidia_smi": nvidia_smi.present(),
        "driver_cuda": nvidia_smi.driver_cuda_version(),
        "cuda_available": bool(torch.cuda.is_available()),
        "triton_interpret": os.environ.get("TRITON_INTERPRET"),
        "torch_wants_triton": _torch_pinned_triton(),
        "sm_count": p.sm_count if p else None,
        "memory_gib": round(p.total_memory / 2**30, 1) if p else None,
        "l2_mib": round(p.l2_bytes / 2**20, 1) if p else None,
        "capabilities": caps.__dict__ if caps else None,
        "spec": spec.key if spec else None,
        "isolation": _isolation(),
        "bytecode_missing": _bytecode_missing(),
    })
    return f


def _bytecode_missing() -> float | None:
    """The fraction of torch's, numpy's and triton's modules (those a grading worker imports) with no compiled
    bytecode beside them here; None where it cannot be told."""
    from .grading import pycache

    try:
        return round(pycache.missing_fraction(pycache.heavy(pycache.worker_modules())), 3)
    except Exception:  # noqa: BLE001 - a report line, never the doctor's failure
        return None


def _bytecode_line(missing: float | None) -> str:
    """The doctor's line on the packages' compiled bytecode: every grading worker is a fresh Python importing torch."""
    from .grading import pycache

    if missing is None:
        return "could not be checked"
    if missing <= pycache.MISSING_AT_MOST:
        return "torch's modules are compiled (grading workers import them from bytecode)"
    return (f"{missing:.0%} of torch's modules have no compiled bytecode here (installed with --no-compile, or "
            f"PYTHONDONTWRITEBYTECODE): `gpucourse grade` compiles them once into its cache for its workers; "
            f"`python -m compileall -q <site-packages>/torch` makes every import faster")


def _isolation() -> dict:
    """How `gpucourse grade` would isolate submissions here: {"level", "detail"} (the detail says how to get the
    full level when it is not there)."""
    from .grading import sandbox

    try:
        return sandbox.detect().to_dict()
    except (ValueError, RuntimeError) as exc:  # GPUCOURSE_ISOLATION unknown, or bubblewrap required and missing
        return {"level": "none", "detail": str(exc)}


def _torch_pinned_triton() -> str | None:
    import importlib.metadata

    try:
        reqs = importlib.metadata.requires("torch") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for r in reqs:
        m = re.match(r"triton\s*==\s*([\w.+]+)", r)
        if m:
            return m.group(1)
    return None


def _vtuple(s: str | None) -> tuple:
    if not s:
        return ()
    return tuple(int(x) for x in re.findall(r"\d+", s.split("+")[0])[:3])


def warnings(f: dict) -> list:
    """Known-bad combinations, each as 'problem. Fix: ...'. Pure function of facts() so it can be unit-tested."""
    out = []
    if f.get("nvidia_smi") and not f.get("torch_cuda"):
        out.append("An NVIDIA driver is present but torch is a CPU-only build, so the course runs in CPU mode. "
                   "Fix: pip install torch --index-url https://download.pytorch.org/whl/cu126 (pick the CUDA "
                   "version your driver supports, see nvidia-smi).")
    elif f.get("nvidia_smi") and f.get("torch_cuda") and not f.get("cuda_available"):
        drv, tc = _vtuple(f.get("driver_cuda")), _vtuple(f.get("torch_cuda"))
        if drv and tc and tc[:2] > drv[:2]:
            out.append(f"torch was built for CUDA {f['torch_cuda']} but the driver supports only CUDA "
                       f"{f['driver_cuda']}, so torch sees no GPU. Fix: update the NVIDIA driver, or install a torch "
                       f"built for CUDA {f['driver_cuda']} or older.")
        else:
            out.append("nvidia-smi works but torch sees no GPU (CUDA_VISIBLE_DEVICES empty, or a driver/runtime "
                       "mismatch). Fix: check `echo $CUDA_VISIBLE_DEVICES` and `python -c 'import torch; "
                       "torch.cuda.init()'` for the real error.")
    want, have = f.get("torch_wants_triton"), f.get("triton")
    if want and have and _vtuple(want) != _vtuple(have):
        out.append(f"torch {f['torch']} was built against triton {want} but triton {have} is installed; "
                   f"torch.compile and some kernels may fail. Fix: pip install triton=={want}")
    if have and _vtuple(have) < (3, 0):
        out.append(f"triton {have} is too old for the course (its interpreter lacks what the lessons use). "
                   "Fix: pip install -U 'triton>=3.0'")
    if not have:
        out.append("Triton is not installed, so the Triton lessons and exercises cannot run. Fix: pip install triton "
                   "(Linux; on Windows the community package triton-windows).")
    if _vtuple(f.get("torch")) and _vtuple(f.get("torch")) < (2, 3):
        out.append(f"torch {f['torch']} is older than the course supports. Fix: pip install -U 'torch>=2.3'")
    if _vtuple(f.get("numpy")) >= (2,) and _vtuple(f.get("torch")) and _vtuple(f.get("torch")) < (2, 3):
        out.append("numpy 2 with torch older than 2.3 breaks tensor/array conversion. Fix: pip install 'numpy<2' "
                   "or upgrade torch.")
    if f.get("mode") == "gpu" and f.get("triton_interpret") == "1":
        out.append("TRITON_INTERPRET=1 is set while a GPU is in use: Triton kernels run in the slow interpreter. "
                   "Fix: unset TRITON_INTERPRET (or set GPUCOURSE_MODE=cpu on purpose).")
    if f.get("mode") == "gpu" and not f.get("spec"):
        out.append(f"{f.get('gpu')} is not in the course's spec table, so results show no % of peak. "
                   "Measured ceilings (`gpucourse doctor --measure`) still work.")
    return out


def limits(f: dict) -> list:
    """(lesson id, title, 'full' or 'limited', reasons) for each lesson, from facts()."""
    caps = f.get("capabilities") or {}
    have = {
        "gpu": f.get("mode") == "gpu",
        "triton": bool(f.get("triton")),
        "nvcc": bool(f.get("nvcc")),
        "ninja": bool(f.get("ninja")),
        "bf16": bool(caps.get("bf16")),
        "tf32": bool(caps.get("tf32")),
        "fp8": bool(caps.get("fp8")),
    }
    rows = []
    for lesson in lessons.all_lessons():
        lid, title, cpu_note = lesson.id, lesson.title, lesson.cpu_mode
        missing = [n for n in lesson.needs if not have[n]]
        if not have["gpu"]:  # in CPU mode only the GPU reason (and missing tools) matter
            missing = [n for n in missing if n not in ("bf16", "tf32", "fp8")]
        reasons = [NEEDS_WHY[n] + (f" ({cpu_note})" if n == "gpu" and cpu_note else "") for n in missing]
        rows.append((lid, title, "full" if not missing else "limited", reasons))
    return rows


def measure(seconds_budget: float = 30.0) -> dict:
    """Measured copy bandwidth and matmul rate on this device (GPU mode only), next to the datasheet peaks."""
    import torch

    from .timing import bench, settle

    device.require_gpu("Measuring ceilings")
    p = device.props()
    spec = specs.lookup(p.name)
    free, _ = torch.cuda.mem_get_info()
    n = min(2**28, free // 8)  # up to 1 GiB of fp32 per buffer
    x = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    y = torch.empty_like(x)
    copy = bench(lambda: y.copy_(x), bytes=2 * x.numel() * 4, name="copy (read + write)")
    x = y = None  # free both buffers before the matmul's
    caps = device.capabilities(p)
    dtype = torch.bfloat16 if caps.bf16 else (torch.float16 if caps.tensor_cores else torch.float32)
    m = 8192 if free > 6 * 8192 * 8192 * 2 else 4096
    a = torch.randn(m, m, device="cuda", dtype=dtype)
    b = torch.randn(m, m, device="cuda", dtype=dtype)
    settle(lambda: torch.matmul(a, b), seconds=1.0)  # sustained rate, not the first second's boost clocks
    mm = bench(torch.matmul, a, b, flops=2 * m**3, dtype=dtype, name=f"matmul {str(dtype)[6:]} {m}³")
    return {
        "copy_gbps": copy.gbps, "copy_ms": copy.median_ms,
        "datasheet_gbps": spec.bandwidth_gbs if spec else None,
        "matmul_dtype": dtypes.torch_name(dtype), "matmul_size": m, "matmul_tflops": mm.tflops,
        "matmul_ms": mm.median_ms,
        "datasheet_tflops": spec.peak_tflops(str(dtype)) if spec else None,
        "warnings": copy.warnings + mm.warnings,
    }


def _isolation_line(iso: dict) -> str:
    """The doctor's line on grading isolation: the level, and what it covers or how to get the full one."""
    if iso["level"] == "bubblewrap":
        return "bubblewrap sandbox per grading worker (`gpucourse grade`): " + iso["detail"].split(": ", 1)[-1]
    if iso["level"] == "none":
        return f"`gpucourse grade` would refuse to grade: {iso['detail']}"
    return f"`gpucourse grade` runs submissions at the {iso['detail']}"


def report(do_measure: bool = False) -> str:
    f = facts()
    lines = ["gpucourse doctor", "================"]
    if f["mode"] == "gpu":
        caps = f["capabilities"]
        lines += ["mode:        GPU",
                  f"device:      {f['gpu']} (compute capability {f['compute_capability']}, {f['sm_count']} SMs, "
                  f"{f['memory_gib']} GiB, L2 {f['l2_mib']} MiB)",
                  "tensor cores: " + ", ".join(f"{k}={'yes' if caps[k] else 'no'}"
                                               for k in ("tf32", "bf16", "fp8", "wgmma"))]
    else:
        lines += ["mode:        CPU (no CUDA GPU in use: Triton runs in its interpreter, timings are CPU timings)"]
    lines += [f"torch:       {f['torch']}" + (f" (built for CUDA {f['torch_cuda']})" if f["torch_cuda"] else
                                              " (CPU-only build)"),
              f"triton:      {f['triton'] or 'not installed'}",
              f"driver:      {f['driver'] or 'none'}" + (f" (supports CUDA {f['driver_cuda']})"
                                                         if f["driver_cuda"] else ""),
              f"python:      {f['python']} on {f['platform']}",
              f"nvcc:        {f['nvcc'] or 'not found (lesson 04 cannot compile CUDA)'}",
              f"ninja:       {f['ninja'] or 'not found (lesson 04 needs it: pip install ninja)'}",
              f"colab:       {'yes' if f['colab'] else 'no'}",
              f"isolation:   {_isolation_line(f['isolation'])}",
              f"bytecode:    {_bytecode_line(f['bytecode_missing'])}"]
    spec = specs.SPECS.get(f["spec"]) if f["spec"] else None
    if spec:
        lines.append(f"datasheet:   {spec.name}: {spec.bandwidth_gbs:,.0f} GB/s, bf16 "
                     f"{spec.tflops.get('bf16') or '-'} TFLOP/s dense ({spec.source})")
    lines += ["", "lessons:"]
    rows = limits(f)
    width = max(len(title) for _, title, _, _ in rows)
    for lid, title, status, reasons in rows:
        lines.append(f"  {lid} {title:<{width}} {status}" + ("" if not reasons else ": " + "; ".join(reasons)))
    if do_measure:
        lines += ["", "measured ceilings:"]
        if f["mode"] != "gpu":
            lines.append("  skipped: measuring ceilings needs a CUDA GPU (CPU mode).")
        else:
            m = measure()
            ds = f" (datasheet {m['datasheet_gbps']:,.0f} GB/s, {100 * m['copy_gbps'] / m['datasheet_gbps']:.0f}%)" \
                if m["datasheet_gbps"] else ""
            lines.append(f"  copy bandwidth: {m['copy_gbps']:,.0f} GB/s{ds}")
            ds = (f" (datasheet {m['datasheet_tflops']:,.0f} TFLOP/s, "
                  f"{100 * m['matmul_tflops'] / m['datasheet_tflops']:.0f}%)") if m["datasheet_tflops"] else ""
            lines.append(f"  matmul {m['matmul_dtype']} {m['matmul_size']}³: {m['matmul_tflops']:,.0f} TFLOP/s{ds}")
            lines += [f"  ! {w}" for w in m["warnings"]]
    ws = warnings(f)
    lines += ["", "warnings:" if ws else "warnings:    none"]
    lines += [f"  - {w}" for w in ws]
    return "\n".join(lines)
