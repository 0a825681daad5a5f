"""What lesson 04 inspects of compiled kernels: ``compile_check`` runs ``nvcc -Xptxas -v`` (no GPU and no CUDA torch
needed) and reports each kernel's registers, shared memory, stack and spills; ``sass`` prints the machine code."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from . import tools
from .tools import CudaCompileError, ToolMissing


@dataclasses.dataclass
class KernelResources:
    name: str  # the kernel's source name (the mangled symbol demangled to its identifier)
    symbol: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0


@dataclasses.dataclass
class CompileReport:
    arch: str
    kernels: dict  # name -> KernelResources
    log: str  # ptxas -v output, verbatim
    seconds: float
    cached: bool = False
    object_path: str | None = None

    def table(self) -> str:
        rows = [f"{'kernel':<28}{'registers':>10}{'shared B':>10}{'stack B':>9}{'spills (st/ld) B':>18}"]
        for k in self.kernels.values():
            rows.append(f"{k.name:<28}{k.registers:>10}{k.shared_bytes:>10}{k.stack_bytes:>9}"
                        f"{f'{k.spill_stores}/{k.spill_loads}':>18}")
        return "\n".join(rows)

    def __str__(self) -> str:
        return f"compiled for {self.arch} in {self.seconds:.1f} s{' (cached)' if self.cached else ''}\n{self.table()}"


def short_name(symbol: str) -> str:
    """``_Z10sum_atomicPKfxPf`` -> ``sum_atomic``; templates and namespaces keep their first identifier."""
    m = re.match(r"_Z(?:N\d*)?(\d+)", symbol)
    if not m:
        return symbol
    start = m.end()
    return symbol[start:start + int(m.group(1))]


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(log: str) -> dict:
    """Per-kernel resources from ``ptxas -v`` output (the format of CUDA 11 to 13): name -> KernelResources."""
    kernels, current, props_of = {}, None, None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            sym = m.group(1)
            current = kernels.setdefault(sym, KernelResources(name=short_name(sym), symbol=sym))
            continue
        m = _PROPS.search(line)
        if m:
            props_of = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and props_of in kernels:
            k = kernels[props_of]
            k.stack_bytes, k.spill_stores, k.spill_loads = map(int, m.groups())
            continue
        m = _USED.search(line)
        if m and current is not None:
            current.registers = int(m.group(1))
            b = _BARRIERS.search(line)
            current.barriers = int(b.group(1)) if b else 0
            s = _SMEM.search(line)
            current.shared_bytes = int(s.group(1)) if s else 0
    return {k.name: k for k in kernels.values()}


def _compiler_message(text: str, filename: str = "kernels.cu") -> str:
    """The compiler's diagnostics, with the temporary directory taken out of file names."""
    text = re.sub(r"[^\s\"']*/(kernels\.cu|cuda\.cu|main\.cpp)", r"\1", text)
    skip = ("[", "FAILED:", "ninja:", "Error building")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(skip)
             and "-gencode" not in ln and " -c " not in ln]
    first_error = next((i for i, ln in enumerate(lines) if "error" in ln.lower()), 0)
    return "\n".join(lines[first_error:first_error + 60]) or text.strip()  # warnings from torch's headers before
    # the first error are noise here


_reports: dict = {}


def compile_check(kernels: str, arch: str | None = None, flags=(), *, cache: bool = True,
                  keep_object: bool = False) -> CompileReport:
    """Compile ``kernels`` (torch-free CUDA C++) with ``nvcc -c -Xptxas -v``; no GPU and no CUDA torch needed.

    Returns a CompileReport (registers, shared memory, stack and spills per kernel, from ptxas). Raises
    CudaCompileError with the compiler's message, or ToolMissing when nvcc is absent. Reports are cached on disk
    by a hash of the source, arch and flags, so each source is compiled once per machine (``cache=False`` forces it).
    """
    arch = arch or tools.device_arch()
    nvcc = tools.require_tools(ninja=False)
    key = tools._hash(kernels, arch, tuple(flags), tools.NVCC_FLAGS)
    if cache and key in _reports and not keep_object:
        return dataclasses.replace(_reports[key], cached=True)
    path = os.path.join(tools.cache_dir(), f"check_{key}.json")
    if cache and not keep_object and os.path.exists(path):
        with open(path) as f:
            d = json.load(f)
        rep = CompileReport(arch=d["arch"], kernels={k: KernelResources(**v) for k, v in d["kernels"].items()},
                            log=d["log"], seconds=d["seconds"], cached=True)
        _reports[key] = rep
        return rep
    work = tempfile.mkdtemp(prefix="gpucourse-nvcc-", dir=tools.cache_dir())
    src, obj = os.path.join(work, "kernels.cu"), os.path.join(work, "kernels.o")
    with open(src, "w") as f:
        f.write(kernels)
    cmd = [nvcc, "-c", src, "-o", obj, f"-arch={arch}", "-Xptxas", "-v", *tools.NVCC_FLAGS, *flags]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise CudaCompileError("nvcc could not compile the kernels:\n" + _compiler_message(proc.stderr + proc.stdout))
    log = "\n".join(ln for ln in (proc.stderr + proc.stdout).splitlines() if "ptxas" in ln or "bytes" in ln)
    rep = CompileReport(arch=arch, kernels=parse_ptxas(log), log=log, seconds=seconds,
                        object_path=obj if keep_object else None)
    if keep_object:
        return rep
    shutil.rmtree(work, ignore_errors=True)
    _reports[key] = rep
    tmp = f"{path}.{os.getpid()}.tmp"  # several processes (pytest workers, notebooks) may compile the same source
    with open(tmp, "w") as f:
        json.dump({"arch": arch, "kernels": {k: dataclasses.asdict(v) for k, v in rep.kernels.items()},
                   "log": log, "seconds": seconds}, f)
    os.replace(tmp, path)
    return rep


def sass(kernels: str, kernel: str | None = None, arch: str | None = None) -> str:
    """The SASS (machine code) of ``kernels``, or of one kernel, via ``cuobjdump -sass``; ToolMissing without it."""
    cuobjdump = tools.tool("cuobjdump")
    if cuobjdump is None:
        raise ToolMissing("cuobjdump was not found (it ships with the full CUDA toolkit, next to nvcc)")
    rep = compile_check(kernels, arch, keep_object=True)
    try:
        text = subprocess.run([cuobjdump, "-sass", rep.object_path], capture_output=True, text=True,
                              check=True).stdout
    finally:
        shutil.rmtree(os.path.dirname(rep.object_path), ignore_errors=True)
    if kernel is None:
        return text
    blocks = re.split(r"(?=\n\s*Function : )", text)
    mine = [b for b in blocks if re.search(rf"Function : \S*{re.escape(kernel)}", b)]
    return "\n".join(mine) if mine else text
