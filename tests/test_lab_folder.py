"""The boundary between the course and its lab (lab/README.md): the course never reads a lab file, what a lesson shows
from a recorded run comes from its curated file, every lab script has a row in the findings log, no script edits
sys.path, and benchmarks/ stays the product's few scripts."""
from __future__ import annotations

import ast
import glob
import json
import os
import re
import subprocess

import pytest

from gpucourse import recorded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS_MAX_LINES = 1_100

# A string naming a lab file or folder: "lab/...", a bare "lab" path component, a lab results file's name
# ("h100-explore-...", "cpu-explore-...", "h100-ncu-...") or a lab script's ("explore_x.py").
LAB_NAME = re.compile(r"(?<![\w.-])lab/|\w-explore-|\bh100-ncu-|\bexplore_\w+\.py")


def names_lab(text: str) -> bool:
    """A path (no whitespace) naming the lab; prose that cites a lab file (an exercise's statement) is no read."""
    return text == "lab" or (not re.search(r"\s", text) and bool(LAB_NAME.search(text)))


def _docstrings(tree: ast.AST) -> set:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def lab_strings(tree: ast.AST, skip: set | None = None) -> list:
    """(line, text) of every string literal in ``tree`` that names a lab path, docstrings left out (comments are not
    in the tree): citing a lab file in prose is fine, reading one is not."""
    skip = _docstrings(tree) | (skip or set())
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip and names_lab(n.value)]


def _code_cells(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    return [(i, "".join(c["source"])) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]


def _parse_cell(source: str) -> ast.AST:
    # IPython lines (%magic, !shell) are not Python: blanked, so the line numbers stay.
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()]
    return ast.parse("\n".join(lines))


def promote_side_violations(tree: ast.Module) -> list:
    """A lesson's recorded.py holds its promote step, the one place the course may name lab files: every function
    that names one (by a literal or a module constant holding one) must be a promote function (name containing
    "promote") or called only from one, and no other function may call it."""
    lab_constants = {t.id for node in tree.body if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name) and lab_strings(node.value)}
    lab_constants |= {e.id for node in tree.body if isinstance(node, ast.Assign)
                      for t in node.targets if isinstance(t, ast.Tuple) and lab_strings(node.value)
                      for e in t.elts if isinstance(e, ast.Name)}
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def names(fn):
        return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}

    touches = {name for name, fn in functions.items() if lab_strings(fn) or names(fn) & lab_constants}
    promote_side, todo = set(), [n for n in functions if "promote" in n]
    while todo:
        name = todo.pop()
        if name not in promote_side:
            promote_side.add(name)
            todo += [c for c in names(functions[name]) if c in functions]
    bad = [f"{name}() names a lab file outside the promote step" for name in sorted(touches - promote_side)]
    bad += [f"{name}() calls {sorted(names(fn) & touches)} (promote-side code that reads the lab)"
            for name, fn in sorted(functions.items()) if name not in promote_side and names(fn) & touches]
    top = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Assign,
                                                       ast.Import, ast.ImportFrom, ast.ClassDef))]
    docstrings = _docstrings(tree)
    bad += [f"line {ln}: module-level code names {text!r}" for n in top for ln, text in lab_strings(n, docstrings)]
    return bad


def course_lab_reads(root: str = ROOT) -> list:
    """Every place under gpucourse/, notebooks/, solutions/, exercises/ whose code names a lab file."""
    found = []
    for path in sorted(glob.glob(os.path.join(root, "gpucourse", "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), rel)
        if re.fullmatch(r"gpucourse/lessons/l\d\d_\w+/recorded\.py", rel):
            found += [f"{rel}: {msg}" for msg in promote_side_violations(tree)]
        else:
            found += [f"{rel}:{ln}: {text!r}" for ln, text in lab_strings(tree)]
    for folder in ("notebooks", "solutions", "exercises"):
        for path in sorted(glob.glob(os.path.join(root, folder, "**", "*.ipynb"), recursive=True)):
            rel = os.path.relpath(path, root)
            for i, source in _code_cells(path):
                try:
                    hits = lab_strings(_parse_cell(source))
                except SyntaxError:  # a workbook's stub may not parse: its non-comment lines, as text
                    code = "\n".join(ln.split("#")[0] for ln in source.splitlines())
                    hits = [(0, m.group(0)) for m in LAB_NAME.finditer(code)]
                found += [f"{rel} cell {i}: {text!r}" for _, text in hits]
        for path in sorted(glob.glob(os.path.join(root, folder, "**", "*.py"), recursive=True)):
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            found += [f"{os.path.relpath(path, root)}:{ln}: {text!r}" for ln, text in lab_strings(tree)]
    return found


def test_the_course_reads_no_lab_file():
    """Lessons, notebooks and workbooks show recorded figures from their curated files, never from lab/ (a
    markdown or docstring citation of a lab file is fine; code that names one is not)."""
    found = course_lab_reads()
    assert not found, "the course names lab files in code:\n" + "\n".join(found)


def test_the_lab_scan_sees_a_read_and_spares_a_citation():
    tree = ast.parse('"""Measured in lab/results/h100-explore-x.json."""\n'
                     'import json\n# lab/results/y.json\nDOC = json.load(open("lab/results/h100-explore-x.json"))\n')
    assert lab_strings(tree) == [(4, "lab/results/h100-explore-x.json")]
    assert lab_strings(ast.parse('p = os.path.join(ROOT, "lab", "results", name)'))
    assert not lab_strings(ast.parse('x = "collaborate/label"; y = "explore the cache"'))
    assert not lab_strings(ast.parse('STATEMENT = "about 80 TFLOP/s (lab/results/h100-explore-x.json). So copy"'))


def test_a_recorded_module_names_lab_files_only_on_its_promote_side():
    ok = ast.parse('SOURCE = "lab/results/h100-explore-x.json"\n'
                   'def show(doc):\n    return doc["ratio"]\n'
                   'def read(rel):\n    return open(rel).read()\n'
                   'def promote():\n    return read(SOURCE)\n')
    assert promote_side_violations(ok) == []
    bad = ast.parse('SOURCE = "lab/results/h100-explore-x.json"\n'
                    'def show():\n    return open(SOURCE).read()\n'
                    'def promote():\n    return SOURCE\n')
    assert promote_side_violations(bad) == ["show() names a lab file outside the promote step"]


CURATED = sorted(glob.glob(os.path.join(ROOT, "benchmarks", "results", "recorded", "*.json")))


def test_there_are_curated_files():
    assert CURATED, "benchmarks/results/recorded/ holds no curated file"


@pytest.mark.parametrize("path", CURATED, ids=[os.path.basename(p) for p in CURATED])
def test_a_curated_file_loads_with_its_declared_keys(path):
    """Each <gpu>-<lesson>.json loads through gpucourse.recorded.load, declares exactly the keys it holds, gives
    each one's value back unchanged, refuses an undeclared key, and names the lab runs it was promoted from."""
    gpu, lesson = os.path.basename(path)[:-len(".json")].split("-", 1)
    assert os.path.isdir(os.path.join(ROOT, "gpucourse", "lessons", lesson)), f"{lesson}: no such lesson"
    with open(path) as f:
        doc = json.load(f)
    assert doc["lesson"] == lesson and doc["gpu"] == gpu
    rec = recorded.load(lesson, gpu)
    assert set(rec) == set(doc["keys"]) == set(doc["values"]) and len(rec) > 0
    for key, value in doc["values"].items():
        assert rec[key] == value
        assert isinstance(doc["keys"][key], str) and doc["keys"][key].strip(), f"{key}: no description"
    with pytest.raises(KeyError, match="declares no key"):
        rec["not a declared key"]
    assert doc["sources"], "no source run named"
    for source in doc["sources"]:
        assert re.fullmatch(r"[0-9a-f]{7,40}", source["commit"] or ""), source
        assert os.path.exists(os.path.join(ROOT, source["file"])), f"{source['file']} is missing"
    assert rec.environment.get("torch"), "the source run's environment is missing"


ROW = re.compile(r"^\|\s*(\d{4}-\d\d-\d\d)\s*\|(.*)\|(.*)\|(.*)\|\s*([0-9a-f]{7,40})\s*\|(.*)\|\s*$")


def log_rows(text: str) -> list:
    """The findings log's rows: date, script, deleted?, commit and the results files each names."""
    rows = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            script = re.fullmatch(r"\s*`([\w.]+\.py)`( \(deleted\))?\s*", m.group(2))
            assert script, f"a row's script cell is not `name.py` [(deleted)]: {line[:120]}"
            rows.append({"script": script.group(1), "deleted": bool(script.group(2)), "commit": m.group(5),
                         "results": re.findall(r"`lab/results/([^`]+)`", m.group(6))})
    return rows


def _readme_rows() -> list:
    with open(os.path.join(ROOT, "lab", "README.md"), encoding="utf-8") as f:
        return log_rows(f.read())


def test_every_lab_script_has_a_row_and_every_row_a_script():
    rows = _readme_rows()
    scripts = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "lab", "*.py")))
    logged = [r["script"] for r in rows if not r["deleted"]]
    assert sorted(set(scripts) - set(logged)) == [], "lab scripts with no row in lab/README.md"
    assert sorted(set(logged) - set(scripts)) == [], "rows for scripts not in lab/ (mark a deleted one (deleted))"
    deleted = [r["script"] for r in rows if r["deleted"]]
    assert not set(deleted) & set(scripts), "a row says deleted but the script is in lab/"
    assert len({r["script"] for r in rows}) == len(rows), "a script has two rows"


def test_every_row_names_existing_results_and_every_result_has_a_row():
    rows = _readme_rows()
    named = {f for r in rows for f in r["results"]}
    missing = sorted(f for f in named if not os.path.exists(os.path.join(ROOT, "lab", "results", f)))
    assert missing == [], "rows name results files that lab/results/ lacks"
    present = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "lab", "results", "*")))
    assert sorted(set(present) - named) == [], "results in lab/results/ that no row of lab/README.md names"


def test_a_deleted_scripts_commit_still_holds_it():
    """`git show <commit>:benchmarks/<script>` (or lab/) brings a deleted script back."""
    if not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout")
    for r in _readme_rows():
        if r["deleted"]:
            found = [subprocess.run(["git", "cat-file", "-e", f"{r['commit']}:{folder}/{r['script']}"], cwd=ROOT,
                                    capture_output=True).returncode == 0 for folder in ("benchmarks", "lab")]
            assert any(found), f"{r['script']}: commit {r['commit']} holds no benchmarks/ or lab/ copy"


def test_the_log_parser_reads_a_row_and_refuses_a_bad_script_cell():
    row = ("| 2026-11-26 | `explore_x.py` (deleted) | why? | because | abc1234 | `lab/results/a.json`, "
           "`lab/results/b.txt` |")
    assert log_rows(row) == [{"script": "explore_x.py", "deleted": True, "commit": "abc1234",
                              "results": ["a.json", "b.txt"]}]
    with pytest.raises(AssertionError, match="script cell"):
        log_rows("| 2026-11-26 | explore_x | why? | because | abc1234 | none |")


def sys_path_edits(source: str) -> list:
    """Lines that change sys.path (insert/append/extend/assignment, site.addsitedir)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("insert", "append", "extend", "__setitem__"):
                target = node.func.value
            elif node.func.attr == "addsitedir":
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            for t in getattr(node, "targets", [getattr(node, "target", None)]):
                target = t.value if isinstance(t, ast.Subscript) else t
        if (isinstance(target, ast.Attribute) and target.attr == "path" and isinstance(target.value, ast.Name)
                and target.value.id == "sys"):
            lines.append(node.lineno)
    return lines


def test_no_script_edits_sys_path():
    """benchmarks/ and lab/ scripts import the course as the installed package (make install; PYTHONPATH on a bare
    GPU machine) and a sibling script by name (its folder is first on the path when it runs)."""
    found = []
    scripts = glob.glob(os.path.join(ROOT, "benchmarks", "*.py")) + glob.glob(os.path.join(ROOT, "lab", "*.py"))
    for path in sorted(scripts):
        with open(path, encoding="utf-8") as f:
            found += [f"{os.path.relpath(path, ROOT)}:{ln}" for ln in sys_path_edits(f.read())]
    assert found == [], "sys.path edits"


def test_the_sys_path_scan_sees_each_kind_of_edit():
    assert sys_path_edits("import sys\nsys.path.insert(0, '.')\nsys.path.append('x')\n") == [2, 3]
    assert sys_path_edits("import sys\nsys.path = ['.']\nsys.path += ['x']\nsys.path[0] = 'y'\n") == [2, 3, 4]
    assert sys_path_edits("import site\nsite.addsitedir('x')\n") == [2]
    assert sys_path_edits('"""sys.path.insert(0, ROOT) is not needed."""\nimport sys\nprint(sys.path)\n') == []


def test_benchmarks_stays_the_products_few_scripts():
    counts = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "benchmarks", "*.py"))):
        with open(path, encoding="utf-8") as f:
            counts[os.path.basename(path)] = sum(1 for _ in f)
    total = sum(counts.values())
    print(f"benchmarks/*.py: {total} lines ({', '.join(f'{k} {v}' for k, v in counts.items())})")
    assert total <= BENCHMARKS_MAX_LINES, f"benchmarks/ has {total} lines; explorations belong in lab/"


def test_a_source_names_the_commit_of_its_own_contents_not_a_look_alikes(tmp_path):
    """git's --follow can take a new file for a copy of a similar one (a second run of one benchmark): the source is
    then the commit that added the new file; a file moved since keeps the commit that last changed its contents."""
    from gpucourse import recorded as curated

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    run = {"runs": [{"step": f"s{i}", "tokens_per_s": 100.0 + i} for i in range(40)]}
    (tmp_path / "run1.json").write_text(json.dumps(run, indent=1))
    git("add", "-A")
    git("commit", "-qm", "run 1")
    first = git("rev-parse", "--short", "HEAD")
    run["runs"][0]["tokens_per_s"] = 50.0  # a second run: nearly the same text
    (tmp_path / "run2.json").write_text(json.dumps(run, indent=1))
    git("add", "-A")
    git("commit", "-qm", "run 2")
    second = git("rev-parse", "--short", "HEAD")
    assert curated.source("run2.json", root=str(tmp_path))["commit"] == second
    assert curated.source("run1.json", root=str(tmp_path))["commit"] == first
    git("mv", "run1.json", "moved.json")
    git("commit", "-qm", "move")
    assert curated.source("moved.json", root=str(tmp_path))["commit"] == first
