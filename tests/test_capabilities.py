"""Capability gating: with the device's properties faked to a T4's (sm_75: fp16 tensor cores, no bf16/TF32/FP8), an
A100's (sm_80) and an H100's (sm_90), every gate a lesson's GPU cells call picks the dtype that device has, or skips,
and says why in a sentence the cell prints. This machine has no GPU, so the gates (the functions the cells call to
choose) are tested, not the timed kernels; a scan checks the gated lessons create no bf16 tensor on the GPU without
asking a gate."""
from __future__ import annotations

import json
import os
import re

import pytest

from gpucourse import device, dtypes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T4 = device.DeviceProps("Tesla T4", 7, 5, 40, 15 * 2**30, 4 * 2**20)
A100 = device.DeviceProps("NVIDIA A100-SXM4-40GB", 8, 0, 108, 40 * 2**30, 40 * 2**20)
H100 = device.DeviceProps("NVIDIA H100 80GB HBM3", 9, 0, 132, 80 * 2**30, 50 * 2**20)
V100 = device.DeviceProps("Tesla V100-SXM2-16GB", 7, 0, 80, 16 * 2**30, 6 * 2**20)
P100 = device.DeviceProps("Tesla P100-PCIE-16GB", 6, 0, 56, 16 * 2**30, 4 * 2**20)


@pytest.fixture(params=[T4, A100, H100], ids=["T4", "A100", "H100"])
def gpu(request, monkeypatch):
    """The session's device faked to this GPU: ``device.props()`` answers with its properties."""
    monkeypatch.setattr(device, "props", lambda index=None: request.param)
    return request.param


def _gates():
    """(name, gate) for every lesson function its GPU cells call to choose the matmul dtype."""
    from gpucourse.lessons.l00_start_here import bench as b00
    from gpucourse.lessons.l01_cpu_vs_gpu_timing import measure as m01
    from gpucourse.lessons.l03_memory_hierarchy import measure as m03
    from gpucourse.lessons.l05_triton import bench as b05
    from gpucourse.lessons.l06_tensor_cores import measure as m06
    from gpucourse.lessons.l07_quantization import measure as m07
    from gpucourse.lessons.l09_compile_profiling import measure as m09
    from gpucourse.lessons.l10_training_scale import model as m10

    return [("00 timing_agreement", b00.matmul_dtype), ("01 timing_pairs / bench vs do_bench", m01.matmul_dtype),
            ("03 ceilings / roofline GEMMs", m03.matmul_dtype),
            ("05 matmul / fused epilogue / offshape", b05.matmul_dtype),
            ("06 alignment / wave sweep", m06.low_dtype),
            ("07 GEMV peers / flush / batch sweep / MLP decode / kernel checks", m07.low_dtype),
            ("09 fusion / compile modes / proton / epilogue / rmsnorm", m09.low_dtype),
            ("10 autocast: memory budget, timeline, DDP / FSDP runs", m10.low_dtype)]


@pytest.mark.parametrize("name,gate", _gates(), ids=[n for n, _ in _gates()])
def test_each_lesson_gate_picks_the_dtype_the_device_has_and_says_why(name, gate, gpu, capsys):
    choice = gate()  # what the cell calls: no props passed, so the (faked) device is asked
    out = capsys.readouterr().out
    if gpu is T4:
        assert choice.dtype == "float16" and choice.short == "fp16", name
        sentence = choice.note
        assert sentence and sentence in out, f"{name}: a T4's fallback must be printed"
        assert sentence.endswith(".") and "Tesla T4 (sm_75)" in sentence and "no bf16 tensor cores" in sentence
        assert "float16" in sentence
        import torch

        assert choice.torch is torch.float16
    else:
        assert (choice.dtype, choice.short, choice.note, out) == ("bfloat16", "bf16", "", ""), name


def test_gates_in_cpu_mode_keep_bf16_and_print_nothing(capsys):
    if device.on_gpu():
        pytest.skip("CPU mode only")
    for name, gate in _gates():
        assert gate().dtype == "bfloat16", name
    assert capsys.readouterr().out == ""


def test_lesson03_roofline_gemms_use_the_dtype_its_ceiling_is_measured_in(gpu):
    from gpucourse.lessons.l03_memory_hierarchy import measure

    want = "float16" if gpu is T4 else "bfloat16"
    for scale in ("gpu", "cpu"):
        ops = measure.default_ops(scale, sin_slots=10.0)
        mm = [op for op in ops if op.kind in ("gemm", "gemv")]
        assert len(mm) >= 3 and {op.dtype for op in mm} == {want}, (scale, [(o.name, o.dtype) for o in mm])
        assert {op.dtype for op in ops if op.kind not in ("gemm", "gemv")} == {"float32"}


@pytest.mark.parametrize("props,dtype,skip", [(T4, None, True), (A100, None, True), (H100, "float8", False)],
                         ids=["T4", "A100", "H100"])
def test_fp8_skips_with_a_sentence_where_there_are_no_fp8_tensor_cores(props, dtype, skip, capsys):
    c = dtypes.for_device("float8", props)
    assert (c.dtype, c.skip) == (dtype, skip)
    out = capsys.readouterr().out
    if skip:
        assert c.note in out and "no fp8 tensor cores" in c.note and "skipped" in c.note
        assert f"sm_{props.sm}" in c.note
        with pytest.raises(ValueError, match="no fp8 tensor cores"):
            c.torch
    else:
        assert out == "" and str(c.torch) == "torch.float8_e4m3fn"


def test_for_device_everywhere_else():
    assert dtypes.for_device("bf16", V100, say=False).dtype == "float16"  # Volta: fp16 tensor cores
    p100 = dtypes.for_device("bfloat16", P100, say=False)
    assert p100.dtype == "float16" and "CUDA cores" in p100.note  # no tensor cores at all
    for p in (T4, A100, H100):
        for want in ("float16", "float32", "torch.float16"):
            c = dtypes.for_device(want, p, say=False)
            assert c.dtype == dtypes.name(want) and c.note == ""


def test_existing_workbook_gates_agree_on_a_t4_and_an_a100(monkeypatch):
    """The workbooks' own choices (lesson 05's matmul, lesson 08's attention): fp16 cases on a T4, bf16 on an A100."""
    from gpucourse.lessons.l05_triton.exercises import matmul
    from gpucourse.lessons.l08_flash_attention.exercises import flash_attention

    monkeypatch.setattr(device, "on_gpu", lambda: True)
    for props, want in ((T4, "float16"), (A100, "bfloat16")):
        monkeypatch.setattr(device, "props", lambda index=None, p=props: p)
        assert matmul._bf16_or_fp16() == want
        assert flash_attention._low() == want
        assert dtypes.for_device("bfloat16", say=False).dtype == want


# Lines that put bf16 on the GPU without asking: `dtype=torch.bfloat16` (or "bfloat16") with no gate on the line.
_HARD_CODED = re.compile(r"dtype\s*=\s*(torch\.bfloat16|[\"']bfloat16[\"'])|\.to\([^)]*torch\.bfloat16|"
                         r"dtype or \(?torch\.bfloat16|^\s*dt\s*=\s*torch\.bfloat16")
_GATED_LESSONS = ("l00_start_here", "l01_cpu_vs_gpu_timing", "l03_memory_hierarchy", "l05_triton",
                  "l07_quantization", "l09_compile_profiling", "l10_training_scale")
_GATED_NOTEBOOKS = ("00_start_here", "01_cpu_vs_gpu_timing", "03_memory_hierarchy", "05_triton",
                    "07_quantization", "09_compile_profiling", "10_training_scale")
# Files whose bf16 is not a tensor-core choice, each with the reason.
_NOT_A_GATE = {os.path.join("gpucourse", "lessons", "l07_quantization", "gemv_inputs.py"):
               "the GEMV exercises' activations, host tensors in bf16 by the exercises' statement: their kernels "
               "multiply in float32 on CUDA cores, and the case 'cancelling' is built for bf16's 8 bits"}

# Kit packages scanned as the gated lessons are (lesson 07's int4 GEMV moved up into gpucourse/quant/).
_GATED_KIT = (os.path.join("gpucourse", "quant"),)

# Lines gated where they are called, by (file, how the line starts): the reason is the gate.
_GATED_BY_CALLER = {(os.path.join("gpucourse", "quant", "tinygemm.py"), "def tinygemm_scales_and_zeros("):
                    "tinygemm's scales are bf16 by its format; its only caller, tinygemm_weights, first asks "
                    "tinygemm_unavailable (bf16 activations and compute capability 8.0+)",
                    (os.path.join("gpucourse", "quant", "linear.py"), "bf16_x = types.SimpleNamespace("):
                    "no tensor: a stand-in for an x, asking tc_available whether bf16 activations could take the "
                    "tensor-core path on this weight's device",
                    (os.path.join("gpucourse", "quant", "linear.py"), "scales = self.scales if self._tg is None"):
                    "dequantized() rounds the scales as tinygemm stores them, only for a weight tinygemm took "
                    "(tinygemm_weights asked tinygemm_unavailable first)"}


def test_gated_lessons_create_no_bf16_gpu_tensor_without_a_gate():
    found = []
    roots = [os.path.join(ROOT, "gpucourse", "lessons", lesson) for lesson in _GATED_LESSONS]
    for root in roots + [os.path.join(ROOT, kit) for kit in _GATED_KIT]:
        for folder, _, files in os.walk(root):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    if os.path.relpath(path, ROOT) in _NOT_A_GATE:
                        continue
                    for n, line in enumerate(open(path, encoding="utf-8"), 1):
                        rel = os.path.relpath(path, ROOT)
                        if _HARD_CODED.search(line) and "has_bf16" not in line and not any(
                                rel == f and line.strip().startswith(start) for f, start in _GATED_BY_CALLER):
                            found.append(f"{rel}:{n}: {line.strip()}")
    for stem in _GATED_NOTEBOOKS:
        for d in ("notebooks", "solutions"):
            with open(os.path.join(ROOT, d, f"{stem}.ipynb"), encoding="utf-8") as fh:
                for i, c in enumerate(json.load(fh)["cells"]):
                    for line in "".join(c["source"]).splitlines() if c["cell_type"] == "code" else []:
                        if _HARD_CODED.search(line) and "has_bf16" not in line:
                            found.append(f"{d}/{stem}.ipynb cell {i}: {line.strip()}")
    assert found == [], "ask gpucourse.dtypes.for_device (or the lesson's matmul_dtype):\n" + "\n".join(found)


def test_the_scan_catches_a_hard_coded_bf16_line():
    assert _HARD_CODED.search('a = torch.randn(8, device="cuda", dtype=torch.bfloat16)')
    assert _HARD_CODED.search("x = torch.empty(4, dtype='bfloat16')")
    assert _HARD_CODED.search('model.to("cuda", torch.bfloat16)')
    assert _HARD_CODED.search("dt = torch.bfloat16 if gpucourse.on_gpu() else torch.float32")
    assert not _HARD_CODED.search('a = torch.randn(8, device="cuda", dtype=low.torch)')
