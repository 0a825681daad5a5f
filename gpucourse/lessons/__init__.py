"""The lessons, one folder each: ``gpucourse/lessons/lNN_topic/``.

Each lesson folder's ``__init__.py`` declares the lesson once, as ``LESSON = Lesson(...)``: its id, title, notebook
stem, what it needs to run fully and what CPU mode gives instead. Beside it lives everything the lesson owns: the code
its notebook measures with, its kernels, its registered benchmarks (``bench.py``) and its exercise specs (the package
``exercises/``, one module per exercise, each defining ``EXERCISE``).

The kit (``gpucourse/*.py``, ``gpucourse/grading/``) finds lessons only through :func:`all_lessons` and
:func:`submodules`, never by importing one by name; a lesson imports the kit and never another lesson (a helper that a
second lesson needs moves up into the kit). ``tests/test_layout.py`` holds both rules.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
import re

# What a lesson may need to run fully; the doctor checks each one and says why it is missing (doctor.NEEDS_WHY).
NEEDS = ("gpu", "triton", "nvcc", "ninja", "bf16", "tf32", "fp8")
_FOLDER = re.compile(r"^l(\d\d)_[a-z0-9_]+$")


@dataclasses.dataclass(frozen=True)
class Lesson:
    """One lesson, declared once in its folder's ``__init__.py``.

    ``id``: two digits ("05"); ``notebook``: the stem shared by ``notebooks/``, ``solutions/`` and ``exercises/``
    ("05_triton"), and the folder is ``l`` + that stem; ``needs``: names from :data:`NEEDS`; ``cpu_mode``: one
    sentence on what a learner without a GPU gets instead ("" where the lesson needs nothing)."""

    id: str
    title: str
    notebook: str
    needs: tuple = ()
    cpu_mode: str = ""

    def __post_init__(self):
        if not re.fullmatch(r"\d\d", self.id):
            raise ValueError(f"lesson id must be two digits, not {self.id!r}")
        if not self.notebook.startswith(self.id + "_"):
            raise ValueError(f"lesson {self.id}: notebook stem {self.notebook!r} must start with {self.id + '_'!r}")
        unknown = set(self.needs) - set(NEEDS)
        if unknown:
            raise ValueError(f"lesson {self.id}: unknown needs {sorted(unknown)}; known: {NEEDS}")

    @property
    def package(self) -> str:
        """The lesson's Python package, e.g. ``gpucourse.lessons.l05_triton``."""
        return f"{__name__}.l{self.notebook}"


def folders() -> list:
    """Names of the lesson folders (``lNN_topic``), sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg and _FOLDER.match(m.name))


def all_lessons() -> list:
    """Every lesson's ``LESSON``, in id order. A folder without one, or whose name does not match its notebook
    stem, is an error that names the folder."""
    out = []
    for name in folders():
        module = importlib.import_module(f"{__name__}.{name}")
        lesson = getattr(module, "LESSON", None)
        if not isinstance(lesson, Lesson):
            raise LookupError(f"gpucourse/lessons/{name}/__init__.py must define LESSON = Lesson(...)")
        if name != "l" + lesson.notebook:
            raise LookupError(f"gpucourse/lessons/{name}: the folder must be named 'l{lesson.notebook}' after its "
                              f"notebook stem")
        out.append(lesson)
    ids = [lesson.id for lesson in out]
    if len(set(ids)) != len(ids):
        raise LookupError(f"two lesson folders declare the same id: {ids}")
    return out


def get(lesson_id: str) -> Lesson:
    """The lesson with this id ("05"); KeyError naming the known ids otherwise."""
    for lesson in all_lessons():
        if lesson.id == lesson_id:
            return lesson
    raise KeyError(f"no lesson {lesson_id!r}; lessons: {[lesson.id for lesson in all_lessons()]}")


def of_module(module_name: str) -> Lesson | None:
    """The lesson a module belongs to (``gpucourse.lessons.l05_triton.bench`` -> lesson 05), or None."""
    prefix = __name__ + "."
    if not module_name.startswith(prefix):
        return None
    folder = module_name[len(prefix):].split(".")[0]
    return getattr(importlib.import_module(prefix + folder), "LESSON", None)


def submodules(name: str) -> list:
    """Import ``<lesson>.<name>`` for every lesson that has one (e.g. ``"bench"``, ``"exercises"``) and return the
    modules, in lesson order. Benchmarks register themselves when their lesson's ``bench`` is imported."""
    out = []
    for lesson in all_lessons():
        full = f"{lesson.package}.{name}"
        if importlib.util.find_spec(full) is not None:
            out.append(importlib.import_module(full))
    return out


def readme_table() -> str:
    """The README's lesson table, generated from the ``LESSON`` declarations (tests/test_layout.py checks that the
    README holds exactly this)."""
    rows = ["| # | lesson | runs fully with | without a GPU |", "|---|---|---|---|"]
    for lesson in all_lessons():
        needs = ", ".join(lesson.needs) or "anything (CPU or GPU)"
        rows.append(f"| {lesson.id} | [{lesson.title}](notebooks/{lesson.notebook}.ipynb) | {needs} | "
                    f"{lesson.cpu_mode or 'the same'} |")
    return "\n".join(rows)

