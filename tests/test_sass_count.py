"""lab/sass_count.py compiles a Triton kernel for an H100 on a CPU-only machine and counts its loop's SASS
instructions per unit of work. Run in a fresh process, as the tool is meant to be (no interpreter)."""
import os
import subprocess
import sys

import pytest

from gpucourse.workbooks import ROOT

SCRIPT = os.path.join(ROOT, "lab", "sass_count.py")

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def strided_sum(x_ptr, out_ptr, n, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, n, BLOCK):
        acc += tl.load(x_ptr + (i + tl.arange(0, BLOCK)) * STRIDE)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))
'''


def _run(tmp_path, *extra):
    pytest.importorskip("triton")
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    proc = subprocess.run([sys.executable, SCRIPT, str(path), *extra],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_loop_is_found_and_counted_per_unit(tmp_path):
    out = _run(tmp_path, "strided_sum", "--sig", "x_ptr=*fp32", "out_ptr=*fp32", "n=i32",
               "--const", "STRIDE=1", "BLOCK=1024", "--warps", "4", "--per", "8")
    assert "strided_sum (triton" in out and "sm_90, 4 warps" in out and "registers a thread" in out
    line = next(s for s in out.splitlines() if s.strip().startswith("loop 0:"))
    assert "per unit" in line and "LDG" in line and "FADD" in line
    assert " 0 shared-memory" in line  # a contiguous load feeding its own layout: nothing through shared memory


def test_an_unknown_kernel_is_refused_by_name(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    proc = subprocess.run([sys.executable, SCRIPT, str(path), "nope",
                           "--sig", "x=*fp32"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "has no 'nope'" in proc.stderr
