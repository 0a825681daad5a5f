"""Every decimal number, and every number with a unit, in a lesson's markdown is printed by one of its cells, set by
its code, or cited (issue #31, item 5; the rules are in prose_numbers.py's docstring). CPU only, reads the committed
outputs: no notebook is executed."""
import copy
import json
from pathlib import Path

import nbformat
import pytest

import prose_numbers

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# The lessons whose prose passes: add a lesson here once its prose is fixed (`python tests/prose_numbers.py
# notebooks/NN_*.ipynb` lists what to fix).
ENFORCED = (
    "00_start_here",
    "01_cpu_vs_gpu_timing",
    "02_async_pipeline",
    "03_memory_hierarchy",
    "04_cuda_reduction",
    "05_triton",
    "06_tensor_cores",
    "07_quantization",
    "08_flash_attention",
    "09_compile_profiling",
    "10_training_scale",
    "11_llm_decode",
)


@pytest.mark.parametrize("lesson", ENFORCED)
def test_lesson_prose_numbers_are_printed_or_cited(lesson):
    findings = prose_numbers.check(NOTEBOOKS / f"{lesson}.ipynb")
    lines = "\n".join(f.line(prose_numbers.label(lesson + ".ipynb")) for f in findings)
    assert not findings, f"{lesson}: {len(findings)} prose number(s) that no cell prints and no source backs:\n{lines}"


# --- the rules, on small notebooks ------------------------------------------------------------------------------------

def notebook(markdown, printed="", source="print(result)"):
    """A markdown cell, then a code cell with ``source`` that printed ``printed``."""
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell(source)
    if printed:
        code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb.cells = [nbformat.v4.new_markdown_cell(markdown), code]
    return json.loads(nbformat.writes(nb))


def flagged(markdown, printed="", source="print(result)"):
    return [f.number for f in prose_numbers.check(notebook(markdown, printed, source))]


def test_a_printed_number_passes_and_an_unprinted_one_is_named():
    assert flagged("The kernel took 31.64 µs.", "kernel: 31.64 µs\n") == []
    findings = prose_numbers.check(notebook("Intro.\n\nThe kernel took 42.5 µs, far below.", "kernel: 31.64 µs\n"))
    assert [(f.cell, f.number) for f in findings] == [(0, "42.5 µs")]
    assert findings[0].sentence == "The kernel took 42.5 µs, far below."
    assert "not printed by any cell" in findings[0].why


def test_rounding_to_the_prose_precision_is_allowed_one_way():
    assert flagged("It ran 1.6× faster.", "speed-up 1.58x\n") == []
    assert flagged("It ran 1.7× faster.", "speed-up 1.58x\n") == ["1.7×"]
    assert flagged("It ran 1.58× faster.", "speed-up 1.6x\n") == ["1.58×"]  # more digits than were printed
    assert flagged("About 2× faster.", "speed-up 1.98x\n") == []
    assert flagged("It took 31.6 µs.", "time 31.64 us\n") == []


def test_thousands_separators_and_x_against_times_sign():
    assert flagged("It reached 1,249 TFLOP/s.", "fp8: 1249 TFLOP/s\n") == []
    assert flagged("It reached 1249 TFLOP/s.", "fp8: 1,249 TFLOP/s\n") == []
    assert flagged("It reached 2,048.5 GB/s.", "copy 2048.5 GB/s\n") == []
    assert flagged("A 2.5x gain.", "gain 2.5×\n") == []


def test_the_unit_must_be_the_printed_ones():
    assert flagged("The copy took 50.5 µs.", "copy: 50.5 GB/s\n") == ["50.5 µs"]
    assert flagged("The copy took 50.5 µs.", "     n     time (µs)\n  4096          50.5\n") == []  # a header
    assert flagged("16 MB took longer.", "sizes: 4 KB, 16,384 KB\n") == []  # one prefix step


def test_a_plain_whole_number_is_not_checked_but_one_with_a_unit_is():
    assert flagged("A tile of 128 by 256 on 132 SMs.") == []
    assert flagged("It took 7 ms and 85% of the time.") == ["7 ms", "85%"]


def test_a_number_the_code_sets_passes_but_not_a_ratio():
    assert flagged("Scales below 0.25 are dropped.", source="threshold = 0.25\nprint(threshold)") == []
    assert flagged("Scales below 0.25 are dropped.", source="threshold = 1  # 0.25 later\nprint('0.25')") == ["0.25"]
    assert flagged("It is 7× faster.", source="n = 7") == ["7×"]


def test_a_cited_sentence_passes():
    assert flagged("The H100 SXM reads 3.35 TB/s (source: NVIDIA H100 SXM datasheet).") == []
    assert flagged("It reports 740 TFLOP/s (Shah et al., 2024).") == []
    assert flagged("See https://example.org/paper for 2.7 ms.") == []
    assert flagged("The explorer measured 1.18 µs (`benchmarks/results/h100.json`).") == []
    assert flagged("The explorer measured 1.18 µs (`benchmarks/results/no-such-file.json`).") == ["1.18 µs"]
    assert flagged("It reads 3.35 TB/s. (source: NVIDIA H100 SXM datasheet)") == []  # the note after the full stop
    assert flagged("It reads 3.35 TB/s. The datasheet says so.") == ["3.35 TB/s"]  # another sentence


def test_code_math_versions_and_references_are_not_prose():
    assert flagged("Call `quant(w, 1.58)` here, or\n\n```python\nx = 2.75\n```\n\nand $e = 2.718$.") == []
    assert flagged("Needs torch 2.5, CUDA 12.4, Triton 3.1 and compute capability 9.0 (sm_90), or v2.1.") == []
    assert flagged("Section 4.2 and lesson 05 say so; see c12 and #31, version 2.11.0 of 2024-05-01.") == []
    assert flagged("## 2.1 Heading\n\n1. First item.\n") == []
    assert flagged("fp16 rounds to 2⁻¹¹ ≈ 4.9e-4.") == []  # the arithmetic is shown
    assert flagged("fp16 rounds to 2⁻¹¹ ≈ 5.9e-4.") == ["5.9e-4"]
    # after a clause's comma, and with the minus sign of typeset text
    # (the operands themselves are printed by no cell here, so they are flagged: only the result is asserted)
    assert "28.5 µs" not in flagged("On the same shape, 21.9 + 50.3 − 43.7 ≈ 28.5 µs.")
    assert "29.5 µs" in flagged("On the same shape, 21.9 + 50.3 − 43.7 ≈ 29.5 µs.")
    assert "28.5 µs" not in flagged("On the same shape, 21.9 + 50.3\n− 43.7 ≈ 28.5 µs.")  # wrapped mid-expression


def test_the_cli_prints_one_line_per_finding_and_fails(tmp_path, capsys):
    path = tmp_path / "07_quantization.ipynb"
    path.write_text(json.dumps(notebook("Intro.\n\nIt ran 1.7× faster.", "speed-up 1.58x\n")))
    assert prose_numbers.main([str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert out[0].startswith('L07 c0: "1.7×" — not printed by any cell') and out[0].endswith("It ran 1.7× faster.")
    path.write_text(json.dumps(notebook("It ran 1.6× faster.", "speed-up 1.58x\n")))
    assert prose_numbers.main([str(path)]) == 0


# --- a wrong number planted in a real lesson is caught ----------------------------------------------------------------

def test_a_planted_wrong_number_in_a_real_lesson_is_reported():
    for lesson in ("10_training_scale", "07_quantization", "08_flash_attention", "06_tensor_cores"):
        nb = json.loads((NOTEBOOKS / f"{lesson}.ipynb").read_text(encoding="utf-8"))
        printed = [q for q in prose_numbers.quantities(nb) if q.support == "printed" and "." in q.number]
        if printed:
            break
    else:
        pytest.skip("no lesson has a decimal number that its cells print")
    target = printed[0]
    before = {(f.cell, f.number) for f in prose_numbers.check(nb)}
    source = "".join(nb["cells"][target.cell]["source"])
    assert source[target.start:target.end].split()[0] == target.number.split()[0]
    digits = source[target.start:target.end].split()[0]
    value = float(digits.replace(",", ""))
    decimals = len(digits.split(".")[1])
    # Values are compared, not meanings: a wrong value may happen to round from some other printed number, so try
    # a few, in a fixed order, and take the first the checker does not account for otherwise.
    for factor in (1.37, 0.61, 2.9, 5.3, 11.7):
        wrong = f"{value * factor:.{decimals}f}"
        planted = copy.deepcopy(nb)
        cell = planted["cells"][target.cell]
        cell["source"] = source[:target.start] + wrong + source[target.start + len(digits):]
        findings = prose_numbers.check(planted)
        new = [f for f in findings if (f.cell, f.number) not in before]
        if new:
            break
    else:
        pytest.fail(f"{lesson} c{target.cell}: no wrong value for {target.number} was reported")
    assert len(findings) == len(before) + 1
    assert [(f.cell, f.number.split()[0]) for f in new] == [(target.cell, wrong)], new
    assert wrong in new[0].sentence
