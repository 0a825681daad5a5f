"""The layout's rules (gpucourse/lessons/__init__.py): one folder per lesson, declared once in LESSON; lessons import
the kit and never each other; the kit finds lessons only by discovery; the doctor and the README read LESSON."""
from __future__ import annotations

import ast
import os
import sys

import pytest

from gpucourse import doctor, lessons
from gpucourse.grading import exercise

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "gpucourse")
LESSONS_DIR = os.path.join(PKG, "lessons")


def _python_files(folder: str) -> list:
    out = []
    for dirpath, _, files in os.walk(folder):
        out += [os.path.join(dirpath, f) for f in files if f.endswith(".py")]
    return sorted(out)


def _imported_modules(path: str, source: str | None = None) -> list:
    """Absolute names of the modules ``path`` imports (relative imports resolved against its package); ``source``
    stands in for the file's text (the rule's own test reads no file)."""
    package = os.path.relpath(path, ROOT)[:-3].split(os.sep)[:-1]  # a/b/c.py and a/b/__init__.py: package a.b
    names = []
    text = open(path).read() if source is None else source
    for node in ast.walk(ast.parse(text, path)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.append(mod)
            names += [f"{mod}.{a.name}" for a in node.names]
    return names


def _lesson_of(module: str):
    parts = module.split(".")
    if len(parts) >= 3 and parts[:2] == ["gpucourse", "lessons"] and parts[2].startswith("l"):
        return parts[2]
    return None


def test_lessons_are_found_by_discovery_and_each_declares_itself():
    found = lessons.all_lessons()
    assert [f"l{lesson.notebook}" for lesson in found] == lessons.folders()
    assert [lesson.id for lesson in found] == sorted({lesson.id for lesson in found})
    for lesson in found:
        for where in ("notebooks", "solutions", "exercises"):
            assert os.path.exists(os.path.join(ROOT, where, f"{lesson.notebook}.ipynb")), (lesson, where)
        assert os.path.exists(os.path.join(ROOT, "tests", "lessons", f"test_l{lesson.notebook}.py")), \
            f"lesson {lesson.id} has no tests/lessons/test_l{lesson.notebook}.py"


def test_every_notebook_belongs_to_a_lesson():
    stems = {lesson.notebook for lesson in lessons.all_lessons()}
    for where in ("notebooks", "solutions", "exercises"):
        on_disk = {f[:-6] for f in os.listdir(os.path.join(ROOT, where)) if f.endswith(".ipynb")}
        assert on_disk <= stems, f"{where}/ has notebooks no lesson declares: {sorted(on_disk - stems)}"


def test_a_folder_without_LESSON_is_an_error_that_names_it(tmp_path, monkeypatch):
    (tmp_path / "l42_orphan").mkdir()
    (tmp_path / "l42_orphan" / "__init__.py").write_text('"""No LESSON here."""\n')
    (tmp_path / "l43_misnamed").mkdir()
    (tmp_path / "l43_misnamed" / "__init__.py").write_text(
        "from gpucourse.lessons import Lesson\nLESSON = Lesson(id='43', title='t', notebook='43_other')\n")
    monkeypatch.setattr(lessons, "__path__", [str(tmp_path)])
    for name in ("l42_orphan", "l43_misnamed"):
        monkeypatch.delitem(sys.modules, f"gpucourse.lessons.{name}", raising=False)
    with pytest.raises(LookupError, match="l42_orphan/__init__.py must define LESSON"):
        lessons.all_lessons()
    (tmp_path / "l42_orphan" / "__init__.py").write_text(
        "from gpucourse.lessons import Lesson\nLESSON = Lesson(id='42', title='t', notebook='42_orphan')\n")
    monkeypatch.delitem(sys.modules, "gpucourse.lessons.l42_orphan", raising=False)
    with pytest.raises(LookupError, match="l43_misnamed: the folder must be named 'l43_other'"):
        lessons.all_lessons()


def test_lesson_declarations_are_checked():
    with pytest.raises(ValueError, match="two digits"):
        lessons.Lesson(id="6", title="t", notebook="6_x")
    with pytest.raises(ValueError, match="must start with '07_'"):
        lessons.Lesson(id="07", title="t", notebook="08_x")
    with pytest.raises(ValueError, match="unknown needs"):
        lessons.Lesson(id="07", title="t", notebook="07_x", needs=("gpu", "quantum"))


def test_no_lesson_imports_another_lesson():
    wrong = []
    for folder in lessons.folders():
        for path in _python_files(os.path.join(LESSONS_DIR, folder)):
            for mod in _imported_modules(path):
                other = _lesson_of(mod)
                if other is not None and other != folder:
                    wrong.append(f"{os.path.relpath(path, ROOT)} imports {mod}")
    assert not wrong, "a lesson imports the kit, never another lesson (move the helper up into the kit):\n" + \
        "\n".join(wrong)


def test_the_import_rule_checker_sees_relative_and_absolute_imports():
    """The rule above must be able to fail: a lesson module that imports a sibling lesson both ways (read from text,
    so no file appears in the tree for another test worker to trip over)."""
    path = os.path.join(LESSONS_DIR, "l05_triton", "probe.py")
    mods = _imported_modules(path, "from ..l03_memory_hierarchy import access\n"
                                   "import gpucourse.lessons.l04_cuda_reduction.bench\n")
    assert {_lesson_of(m) for m in mods} >= {"l03_memory_hierarchy", "l04_cuda_reduction"}


def test_the_kit_never_imports_a_lesson_by_name():
    wrong = []
    for path in _python_files(PKG):
        if path.startswith(LESSONS_DIR + os.sep):
            continue
        wrong += [f"{os.path.relpath(path, ROOT)} imports {m}" for m in _imported_modules(path) if _lesson_of(m)]
    assert not wrong, "the kit finds lessons by discovery (gpucourse.lessons), never by name:\n" + "\n".join(wrong)


def test_doctor_lists_exactly_the_lessons_that_exist():
    rows = doctor.limits({"mode": "cpu"})
    assert [(lid, title) for lid, title, _, _ in rows] == [(lesson.id, lesson.title)
                                                          for lesson in lessons.all_lessons()]
    assert set(doctor.NEEDS_WHY) == set(lessons.NEEDS)
    report = doctor.report()
    for lesson in lessons.all_lessons():
        assert f"  {lesson.id} {lesson.title}" in report


def test_readme_lesson_table_is_generated_from_LESSON():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert lessons.readme_table() in readme, \
        "README's lesson table differs from the LESSON declarations: paste `python -m gpucourse.lessons`"


def test_exercises_and_benchmarks_belong_to_lessons():
    from gpucourse import benchmarks

    ids = {lesson.id for lesson in lessons.all_lessons()}
    assert {e["lesson"] for e in benchmarks.registry().values()} <= ids
    for ex_id in exercise.all_ids():
        module = exercise._modules()[ex_id]
        assert _lesson_of(module) in lessons.folders(), module
        assert exercise.get(ex_id).id == ex_id
