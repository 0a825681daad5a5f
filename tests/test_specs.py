"""The GPU spec table: every required chip present, sourced, plausible; device names map to the right entry. And
the lessons' use of solved workbooks: each its own, another lesson's only where declared."""
import ast
import importlib
import os

import pytest

from gpucourse import lessons, specs

REQUIRED = ["T4", "L4", "A10G", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "RTX3090", "RTX4090",
            "RTX5090"]


def test_table_has_every_required_gpu_with_a_source():
    for key in REQUIRED:
        s = specs.SPECS[key]
        assert s.source and len(s.source) > 10, key
        assert 100 <= s.bandwidth_gbs <= 10_000, key
        assert s.tflops["fp32"] > 1, key
        assert s.tflops["fp16"] >= s.tflops["fp32"], key  # tensor cores beat CUDA cores


def test_dtype_support_matches_the_architecture():
    assert specs.SPECS["T4"].peak_tflops("bf16") is None  # Turing: no bf16 tensor cores
    assert specs.SPECS["A100-80GB"].peak_tflops("fp8") is None  # Ampere: no fp8
    assert specs.SPECS["H100-SXM"].peak_tflops("torch.bfloat16") == pytest.approx(989.4)
    assert specs.SPECS["H100-SXM"].peak_tflops("float8_e4m3fn") == pytest.approx(1978.9)


@pytest.mark.parametrize("name, key", [
    ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA A10G", "A10G"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
    ("NVIDIA H200", "H200"), ("NVIDIA GeForce RTX 3090", "RTX3090"), ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ("NVIDIA GeForce RTX 5090", "RTX5090"),
])
def test_lookup_by_torch_device_name(name, key):
    assert specs.lookup(name).key == key


def test_unknown_gpu_is_none():
    assert specs.lookup("NVIDIA Quadro K420") is None


def test_slug_names_results_files_after_the_spec_else_the_device(monkeypatch):
    """specs.slug: the results files' prefix (h100.json) from the spec table, and for a GPU not in it the device's
    own name made file-safe (the GPU suite and explore_cuda_binding both name their files with it)."""
    from gpucourse import device

    for name, want in (("NVIDIA H100 80GB HBM3", "h100"), ("Tesla T4", "t4"),
                       ("Some Future GPU (64 GB)", "some-future-gpu-64-gb")):
        monkeypatch.setattr(device, "hardware_props", lambda index=None, n=name: device.DeviceProps(n, 9, 0, 1, 1, 1))
        assert specs.slug() == want


# --- Solved workbooks: a lesson reaches another lesson's only by declaring it --------------------------------------
# Lesson modules load their own solved workbook through `solutions = gpucourse.solutions.for_lesson(LESSON)`. A call
# naming another lesson's workbook (lesson 06 times lesson 05's matmul) is a dependency between lessons that the
# import rule of tests/test_layout.py cannot see: the module declares it in USES_WORKBOOKS, and these tests hold
# every such call to the declaration.

_LESSONS_DIR = os.path.dirname(lessons.__file__)


def _workbooks_named(source: str, stems) -> tuple:
    """(the workbook stems that calls in ``source`` name, as a string argument "05_triton" or a path ending in
    "05_triton.ipynb"; the stems its module-level ``USES_WORKBOOKS`` declares)."""
    named, declared = set(), set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for arg in list(node.args) + [k.value for k in node.keywords]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    named |= {s for s in stems if arg.value == s or arg.value.endswith(f"{s}.ipynb")}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "USES_WORKBOOKS"
                                                for t in node.targets):
            declared |= set(ast.literal_eval(node.value))
    return named, declared


def _lesson_files():
    for lesson in lessons.all_lessons():
        folder = os.path.join(_LESSONS_DIR, f"l{lesson.notebook}")
        for dirpath, _, files in os.walk(folder):
            for f in sorted(files):
                if f.endswith(".py"):
                    yield lesson, os.path.join(dirpath, f)


def test_a_lesson_names_another_lessons_workbook_only_where_it_declares_it():
    stems = {lesson.notebook for lesson in lessons.all_lessons()}
    wrong, borrowed = [], {}
    for lesson, path in _lesson_files():
        with open(path, encoding="utf-8") as f:
            named, declared = _workbooks_named(f.read(), stems)
        others = named - {lesson.notebook}
        where = os.path.relpath(path, _LESSONS_DIR)
        if others - declared:
            wrong.append(f"{where} loads {sorted(others - declared)} without declaring it in USES_WORKBOOKS")
        if declared - others:
            wrong.append(f"{where} declares {sorted(declared - others)} in USES_WORKBOOKS but never loads it")
        if others:
            borrowed[where] = sorted(others)
    assert not wrong, "\n".join(wrong)
    assert borrowed == {os.path.join("l06_tensor_cores", "bench.py"): ["05_triton"]}


def test_the_workbook_rule_sees_an_undeclared_call():
    """The rule above must be able to fail: a call naming lesson 05's workbook, with and without its declaration."""
    stems = {"05_triton", "06_tensor_cores"}
    call = "from gpucourse.solutions import cached_solutions\nmm = cached_solutions('05_triton')['matmul']\n"
    assert _workbooks_named(call, stems) == ({"05_triton"}, set())
    assert _workbooks_named("USES_WORKBOOKS = ('05_triton',)\n" + call, stems) == ({"05_triton"}, {"05_triton"})
    assert _workbooks_named("p = os.path.join(ROOT, 'solutions', '05_triton.ipynb')\n", stems)[0] == {"05_triton"}


def test_each_lessons_solutions_is_its_own_workbook():
    """Every lesson module that offers ``solutions`` (bench.py, measure.py) gets it from gpucourse.solutions.for_lesson
    for its own lesson (the notebooks, gpu_smoke and benchmarks call ``bench.solutions()``)."""
    from gpucourse import solutions as kit

    found = 0
    for lesson in lessons.all_lessons():
        for name in ("bench", "measure"):
            if not os.path.exists(os.path.join(_LESSONS_DIR, f"l{lesson.notebook}", f"{name}.py")):
                continue
            module = importlib.import_module(f"{lesson.package}.{name}")
            sol = getattr(module, "solutions", None)
            if sol is None:
                continue
            found += 1
            assert sol.__doc__ == kit.for_lesson(lesson).__doc__, (lesson.id, name)
            assert f"solutions/{lesson.notebook}.ipynb" in sol.__doc__
    assert found == 6  # lessons 03-08
