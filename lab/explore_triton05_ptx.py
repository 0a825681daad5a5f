#!/usr/bin/env python3
"""What the 16-byte hints of lesson 05's reference kernels change in the code Triton generates (issue #18 §4).

Compiles, without a GPU (Triton's front end and LLVM's NVPTX back end run on the CPU; only ptxas is not needed), the
workbook's ``softmax_rows_kernel`` for a 1000-wide fp16 row and ``matmul_kernel`` for bf16 with strides of 1000
elements, each with its hint off (VEC / ALIGN = 1) and on (8), for sm_90, and counts the global memory instructions
in the PTX: ``ld.global.b16`` is one 2-byte load per element, ``ld.global.v4.b32`` a 16-byte load, and
``cp.async ... 0x10`` a 16-byte asynchronous copy into shared memory (what the matmul's software pipeline needs).
The arguments are specialized as Triton does for such a launch: pointers 16-byte aligned, unit strides constant,
other integers (1000, a row stride of 1000) with no divisibility known.

  python3 lab/explore_triton05_ptx.py      (writes lab/results/ptx-explore-triton05.json)

Run it with ``TRITON_INTERPRET`` unset (the interpreter compiles nothing) and without importing gpucourse (which
sets it in CPU mode): the solution cells are read from the notebook's JSON directly.
"""
import collections
import json
import linecache
import os
import re
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton._C.libtriton import ir
from triton.backends import backends
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALIGNED = [["tt.divisibility", 16]]


def solution_namespace() -> dict:
    with open(os.path.join(ROOT, "solutions", "05_triton.ipynb")) as f:
        cells = ["".join(c["source"]) for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    keep = [c for c in cells if "### BEGIN SOLUTION" in c or all(
        ln.startswith(("import ", "from ")) for ln in c.splitlines() if ln.strip() and not ln.startswith("#"))]
    keep = [c for c in keep if "gpucourse" not in c]
    source = "\n\n".join(keep) + "\n"
    linecache.cache["<solutions/05_triton.ipynb>"] = (len(source), None, source.splitlines(True),
                                                      "<solutions/05_triton.ipynb>")
    ns = {"__name__": "solutions_05"}
    exec(compile(source, "<solutions/05_triton.ipynb>", "exec"), ns)
    return ns


def ptx(fn, signature: dict, constants: dict, attrs: dict, num_warps: int, num_stages: int) -> str:
    target = GPUTarget("cuda", 90, 32)
    backend = backends["nvidia"].compiler(target)
    options = backend.parse_options({"num_warps": num_warps, "num_stages": num_stages})
    stages = {}
    src = ASTSource(fn, signature, constants, attrs)
    backend.add_stages(stages, options, src.language)
    ctx = ir.context()
    ir.load_dialects(ctx)
    backend.load_dialects(ctx)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), ctx)
    metadata = {}
    for name, stage in stages.items():
        if name == "cubin":  # needs ptxas; the PTX is what we read
            break
        module = stage(module, metadata)
    return module


def memory_ops(text: str) -> dict:
    ops = collections.Counter()
    for line in text.splitlines():
        line = line.strip()
        m = re.search(r"\b(ld\.global\S*|st\.global\S*|cp\.async\.\S+)", line)
        if not m:
            continue
        op = m.group(1)
        if op.startswith("cp.async.cg") or op.startswith("cp.async.ca"):
            size = re.search(r",\s*(0x[0-9a-f]+|\d+)\s*(,|;)", line)
            op += f" ({int(size.group(1), 0)} bytes)" if size else ""
        ops[op] += 1
    return dict(ops.most_common())


def main():
    ns = solution_namespace()
    out = {"triton": triton.__version__, "target": "sm_90 (PTX, no ptxas)", "softmax_rows_kernel": {},
           "matmul_kernel": {}}
    rows = ns["softmax_rows_kernel"]
    sig = dict(zip(rows.arg_names, ["*fp16", "*fp16", "i32", "i32", "i32", "constexpr", "i32", "constexpr",
                                    "constexpr", "constexpr"]))
    for vec in (1, 8):
        text = ptx(rows, sig, {"x_col_stride": 1, "BLOCK": 1024, "ROWS": 4, "VEC": vec},
                   {(0,): ALIGNED, (1,): ALIGNED}, num_warps=4, num_stages=3)
        out["softmax_rows_kernel"][f"fp16, width 1000, ROWS=4, VEC={vec}"] = memory_ops(text)
    mm = ns["matmul_kernel"].fn.fn  # under @autotune and @heuristics
    sig = dict(zip(mm.arg_names, ["*bf16"] * 4 + ["i32"] * 9 + ["constexpr"] * 8))
    sig["stride_ak"] = sig["stride_bn"] = sig["stride_cn"] = "constexpr"
    for align in (1, 8):
        consts = dict(stride_ak=1, stride_bn=1, stride_cn=1, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8,
                      ACTIVATION="none", INTERPRETED=False, EVEN_K=False, ALIGN=align)
        text = ptx(mm, sig, consts, {(i,): ALIGNED for i in range(4)}, num_warps=4, num_stages=4)
        out["matmul_kernel"][f"bf16, K = N = 1000 (strides 1000), 64x64x64, ALIGN={align}"] = memory_ops(text)
    path = os.path.join(ROOT, "lab", "results", "ptx-explore-triton05.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
