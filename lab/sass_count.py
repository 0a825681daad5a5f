#!/usr/bin/env python3
"""Compile one Triton kernel for a GPU this machine does not have, and count what its loop executes (no GPU needed).

How lesson 07's rounds 9-11 were steered without device time: Triton compiles to a cubin for any target on a CPU-only
machine (its wheel carries ptxas and cuobjdump), so the SASS of a candidate kernel can be read here. This prints the
registers per thread, the shared memory it declares, and for each loop (a backward branch) its instruction count,
the count per unit of work you name (``--per``: e.g. weights a thread handles per iteration), how many shared-memory
instructions it holds (LDS/STS/LDSM: a layout conversion shows up there) and its commonest opcodes.

The H100 runs Triton 3.6; this machine's is newer and may compile the same source differently (round nine's did).
To see what the H100's Triton makes of it, unpack its wheel and put it first on the path:

    pip download --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \\
        -d /tmp/w triton==3.6.0 && unzip -q /tmp/w/triton-3.6.0-*.whl -d /tmp/t36
    PYTHONPATH=/tmp/t36 python3 lab/sass_count.py gpucourse/quant/kernels.py \\
        w4a16_rows_kernel --sig xp_ptr=*fp32 w_ptr=*i32 s_ptr=*fp32 out_ptr=*bf16 N=i32 KW=i32 stride_wn=i32 \\
        stride_sn=i32 stride_om=i32 MAGIC=i32 --const GROUP=128 BLOCK_N=4 BLOCK_W=128 --warps 1 --per 128

``--sig`` names every non-constexpr argument with its Triton type, in order; pointers and integer arguments are
assumed 16-byte aligned / divisible by 16 (as Triton specializes them for the course's shapes) unless ``--no-align``.
The file is loaded as a plain module (not through ``gpucourse``), so nothing switches Triton to its interpreter.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import subprocess
import sys
import tempfile


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location("sass_count_target", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, name, None)
    if fn is None:
        sys.exit(f"{path} has no {name!r} (a @triton.jit function defined at module level, or under an `if`)")
    return fn


def loops(sass: str) -> list:
    """[(instructions of the loop body, in order)] for each backward branch of the cuobjdump listing."""
    ins = [(int(m.group(1), 16), m.group(2).strip())
           for m in re.finditer(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", sass, re.M)]
    out = []
    for addr, text in ins:
        for target in re.findall(r"BRA (0x[0-9a-f]+)", text):
            if int(target, 16) < addr:
                out.append([t for a, t in ins if int(target, 16) <= a <= addr])
    return out


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("kernel")
    ap.add_argument("--sig", nargs="+", required=True, metavar="NAME=TYPE")
    ap.add_argument("--const", nargs="*", default=[], metavar="NAME=VALUE")
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--arch", type=int, default=90, help="compute capability as a number (90: H100)")
    ap.add_argument("--per", type=float, default=None, help="units of work per thread and loop iteration")
    ap.add_argument("--no-align", action="store_true")
    args = ap.parse_args(argv)

    import triton
    from triton.backends.compiler import GPUTarget

    fn = load(args.file, args.kernel)
    sig = dict(kv.split("=", 1) for kv in args.sig)
    const = {k: (True if v == "True" else False if v == "False" else int(v))
             for k, v in (kv.split("=", 1) for kv in args.const)}
    sig.update({k: "constexpr" for k in const})
    attrs = {} if args.no_align else {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values())
                                        if t.startswith("*") or t in ("i32", "i64")}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", args.arch, 32), options={"num_warps": args.warps})
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", f.name], capture_output=True,
                              text=True, check=True).stdout
        res = subprocess.run([os.path.join(tools, "cuobjdump"), "-res-usage", f.name], capture_output=True,
                             text=True, check=True).stdout
    usage = dict(re.findall(r"(REG|SHARED|LOCAL):(\d+)", res))
    print(f"{args.kernel} (triton {triton.__version__}, sm_{args.arch}, {args.warps} warps): "
          f"{usage.get('REG', '?')} registers a thread, {usage.get('SHARED', '?')} B shared, "
          f"{usage.get('LOCAL', '?')} B local (spills)")
    for i, body in enumerate(loops(sass)):
        ops = collections.Counter(opcode(t) for t in body)
        shared = sum(n for op, n in ops.items() if op in ("LDS", "STS", "LDSM", "STSM"))
        per = f", {len(body) / args.per:.2f} per unit" if args.per else ""
        print(f"  loop {i}: {len(body)} instructions{per}, {shared} shared-memory; "
              + ", ".join(f"{op} {n}" for op, n in ops.most_common(12)))
    if not loops(sass):
        print("  no loop (no backward branch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
