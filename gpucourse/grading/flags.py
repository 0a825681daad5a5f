"""The learner's source, read before it runs: which code is the learner's (:func:`learner_source`: of a workbook, the
cells the course did not ship), the reasons for a human to look at it (:func:`static_flags`: code that reaches for
the grader's machinery) and where it imports the course's lessons or the kit package of their kernels,
``gpucourse.quant`` (:func:`course_code_used`). Flags are a column of the report, never the verdict; the course-code
check is (see docs/grading.md)."""
from __future__ import annotations

import ast
import contextlib
import functools
import os
import re

# The course's kit modules that judges rely on; the course's lesson modules a source imports are added per source
# (:func:`_lesson_names`), so no lesson is named here.
JUDGE_HELPERS = ("syncs", "roofline", "asyncqueue")

LESSONS_WHY = "imports the course's lessons (the instructor's own kernels and helpers)"
# The kit package of lesson 07's kernels (lessons 07 and 11 share it): importing it is importing the lessons. Kept out
# of SUSPICIOUS, whose patterns name no lesson module (its name is also one of lesson 07's modules).
_KIT_KERNELS = re.compile(r"gpucourse\s*\.\s*quant\b|from\s+gpucourse\s+import\s+quant\b")

SUSPICIOUS = [  # (regex, why a human should look)
    (r"\bgc\s*\.\s*get_objects|\bgc\s*\.\s*get_referr", "walks the garbage collector (gc.get_objects/referrers)"),
    (r"\bsys\s*\.\s*modules\b", "touches sys.modules"),
    (r"gpucourse\s*\.\s*grading|from\s+gpucourse\s+import\s+grading|gpucourse\s*\.\s*lessons\b[\w.]*\.\s*exercises|"
     r"\bexercises\s+import\b",
     "reaches into the grader or the exercise specs"),
    (r"gpucourse\s*\.\s*lessons\b|from\s+gpucourse\s+import\s+lessons\b", LESSONS_WHY),
    (r"\bos\s*\.\s*_exit\b|\bos\s*\.\s*kill\b|\bsignal\s*\.", "exits or signals the process itself"),
    (r"\bctypes\b|\bcffi\b", "uses ctypes/cffi (raw memory access)"),
    (r"/proc/|\bos\s*\.\s*(write|fdopen|dup2?)\b|\bfdopen\b", "writes to raw file descriptors or reads /proc"),
    (r"\bsys\s*\._getframe\b|\binspect\s*\.\s*(stack|currentframe)|\bf_back\b", "inspects the caller's frames"),
    (r"\bbuiltins\b|__builtins__", "modifies builtins"),
    (r"setattr\s*\(\s*(torch|triton)|\btorch\s*\.\s*\w+\s*=[^=]|\btorch\.Tensor\s*\.\s*\w+\s*=[^=]|"
     r"\btriton\s*\.[\w.]+\s*=[^=]", "monkeypatches torch or triton"),
    ("{helpers}", "monkeypatches the course's helpers (what judges rely on)"),
    (r"DisableTorchFunction|_disable_torch_function|torch_function_stack|_set_torch_function_state|"
     r"TorchFunctionMode|TorchDispatchMode|__torch_function__|__torch_dispatch__|torch\.library|\btorch\._C\b|"
     r"set_sync_debug_mode|function_mode_stack|dispatch_mode_stack|_disable_current_modes|_python_dispatch|"
     r"DisableTorchDispatch|_ExcludeDispatchKeyGuard",
     "hooks into or switches off torch's dispatch (modes, torch.library, torch._C): the sync detector and the op "
     "recorder rely on it"),
    (r"\bsys\s*\.\s*(settrace|setprofile|addaudithook|monitoring)|\bgc\s*\.\s*callbacks|\bweakref\b|"
     r"\bthreading\b|\b_thread\b|\bdef\s+__del__", "installs hooks or threads that run code later"),
    (r"\bsubprocess\b|\bos\s*\.\s*(system|popen|fork)\b|\bmultiprocessing\b", "starts other processes"),
    (r"\bsocket\b|\burllib\b|\brequests\b", "uses the network"),
]

_FROM_LESSONS = re.compile(r"from\s+(gpucourse\s*\.\s*(?:lessons|quant)(?:\s*\.\s*\w+)*)\s+import\s+\(?([\w\s,]+)")
_IMPORT_LESSON_AS = re.compile(r"import\s+(gpucourse\s*\.\s*(?:lessons|quant)(?:\s*\.\s*\w+)+)\s+as\s+(\w+)")


def _lesson_names(source: str) -> list:
    """The names ``source`` binds to the course's lesson modules or their contents (``from gpucourse.lessons.l02_x
    import trainloop``, ``import gpucourse.lessons.l02_x.trainloop as tl``), read from the text (a notebook's
    magics do not parse). The exercise specs are left out: reaching into them has a flag of its own."""
    names = []
    for m in _FROM_LESSONS.finditer(source):
        for item in m.group(2).split(","):
            words = item.split()
            if words and words[0].isidentifier() and _is_course_lesson(f"{_dotted(m.group(1))}.{words[0]}"):
                names.append(words[2] if len(words) == 3 and words[1] == "as" else words[0])
    names += [alias for module, alias in _IMPORT_LESSON_AS.findall(source) if _is_course_lesson(_dotted(module))]
    return names


def _dotted(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _helpers_pattern(source: str) -> str:
    """The regex of an attribute set on a course helper: the judges' kit modules, the exercise specs and the
    lesson modules ``source`` imports."""
    names = "|".join(dict.fromkeys(list(JUDGE_HELPERS) + [re.escape(n) for n in _lesson_names(source)]))
    return (rf"\b({names}|exercises\.\w+)\s*\.\s*\w+\s*(\.\s*\w+\s*)*=[^=]|"
            rf"setattr\s*\(\s*(gpucourse|{names})\b")


def static_flags(source: str) -> list:
    """Reasons, from the source text alone, for a human to look at a submission."""
    return [f"source {why}" for pattern, why in SUSPICIOUS
            if re.search(_helpers_pattern(source) if pattern == "{helpers}" else pattern, source)
            or (why == LESSONS_WHY and _KIT_KERNELS.search(source))]


def read_source(path: str) -> str:
    """The code the learner wrote (:func:`learner_source`), "" when it cannot be read."""
    try:
        return learner_source(path)
    except Exception:  # an unreadable file is reported by the worker as an error
        return ""


def _cell_key(source: str) -> str:
    """A code cell as compared with the course's: trailing spaces and blank lines at either end ignored."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


@functools.lru_cache(maxsize=1)
def shipped_cells() -> frozenset:
    """The code cells of the workbooks the course hands out (exercises/*.ipynb, generated from solutions/), as
    :func:`_cell_key`s; empty where the checkout's exercises/ is not there (then every cell counts as the learner's).
    The shipped cells import the course's modules (demos, helpers, ``gpucourse.check``): a flag every honest
    learner's workbook got would teach instructors to ignore flags (issue 39)."""
    from .. import workbooks

    folder = os.path.join(workbooks.ROOT, "exercises")
    cells: set = set()
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if name.endswith(".ipynb"):
            with contextlib.suppress(Exception):
                cells.update(_cell_key(c) for c in workbooks.code_cells(os.path.join(folder, name)))
    return frozenset(cells)


def learner_source(path: str) -> str:
    """The code the learner wrote, which flags and the course-code check read: a .py file whole (of a workbook saved
    as a script, its chunks that are not shipped cells: :func:`_script_learner_source`); of a notebook, the code
    cells that are not the course's own (identical to a cell of a workbook it ships: :func:`shipped_cells`)."""
    if not path.endswith(".ipynb"):
        with open(path, encoding="utf-8", errors="replace") as f:
            return _script_learner_source(f.read())
    from ..workbooks import code_cells

    shipped = shipped_cells()
    return "\n".join(f"# cell {i}\n{source}\n" for i, source in enumerate(code_cells(path))
                     if _cell_key(source) not in shipped)


_CELL_MARK = re.compile(r"#\s*(In\s*\[[^\]]*\]:|%%.*)\s*")  # nbconvert's "# In[3]:", jupytext's "# %%"


def _script_learner_source(text: str) -> str:
    """Of a workbook saved as a script (``jupyter nbconvert --to script``: cells after ``# In[ ]:``, markdown as
    comments; jupytext: ``# %%``), the chunks that are not a shipped cell (:func:`shipped_cells`), each compared
    with and without the comment lines that follow it (nbconvert writes the next markdown cell there); a script
    without such marks is the learner's whole. Chunks kept keep their line numbers (blanked ones become empty)."""
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if _CELL_MARK.fullmatch(line)]
    if not marks:
        return text
    shipped = shipped_cells()
    bounds = marks + [len(lines)]
    out = list(lines)
    for start, end in zip(bounds, bounds[1:]):
        chunk = lines[start + 1:end]
        while chunk and not chunk[-1].strip():
            chunk = chunk[:-1]
        cut = len(chunk)
        while True:
            if _cell_key("\n".join(chunk[:cut])) in shipped:
                out[start + 1:start + 1 + cut] = [""] * cut
                break
            if cut == 0 or not (chunk[cut - 1].lstrip().startswith("#") or not chunk[cut - 1].strip()):
                break
            cut -= 1
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def course_code_used(source: str) -> list:
    """Where ``source`` (the learner's own code) imports the course's lessons, the instructor's kernels and helpers:
    ``["line 3: from gpucourse.lessons.l07_quantization.kernels import w8a16_gemv"]``, from its syntax tree (a
    comment or a docstring naming them is not a use). The exercise specs (``...exercises...``) are left to the flags:
    reaching into them is tampering with the grader, not an answer. A name built at run time escapes this; the
    worker's launch counting still sees the course's Triton kernels, and the flag a human sees stays."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if re.fullmatch(r"gpucourse\.(lessons|quant)(\.\w+)*", node.value) else []
        if any(_is_course_lesson(n) for n in names):
            where = lines[node.lineno - 1].strip()[:120] if 0 < node.lineno <= len(lines) else ""
            found.append(f"line {node.lineno}: {where}")
    return found


def _is_course_lesson(module: str) -> bool:
    """Whether ``module`` is (in) any of the course's lessons (``gpucourse.lessons.*``), the exercise specs excepted
    (see :func:`course_code_used`), or (in) the kit package of lesson 07's kernels, ``gpucourse.quant`` (lessons 07
    and 11 share it: the same instructor's kernels under another name). The kit's other modules (timing, checks)
    are the learner's to use."""
    parts = module.split(".")
    return (parts[:2] == ["gpucourse", "lessons"] and "exercises" not in parts) or parts[:2] == ["gpucourse", "quant"]
