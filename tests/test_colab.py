"""Colab: every notebook a learner opens carries the generated badge and install cell; the cell does nothing off
Colab, and on Colab (simulated: the runtime's marker, a fresh virtual environment) it installs the course with its
light dependencies only (no lab or test extras) and the notebook's next cell runs."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import tomllib

import pytest

from gpucourse import colab

ROOT = colab.ROOT
NOTEBOOKS = colab.notebooks()
LAB_AND_TEST = {"jupyterlab", "ipykernel", "nbval", "pytest", "pytest-xdist", "nbformat", "notebook", "playwright"}


def _name(req: str) -> str:
    return re.split(r"[\s<>=!;\[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _install_cell(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def test_every_notebook_folder_is_covered():
    assert {p.split("/")[0] for p in NOTEBOOKS} == {"notebooks", "solutions", "exercises"}
    assert len(NOTEBOOKS) >= 33


@pytest.mark.parametrize("rel", NOTEBOOKS)
def test_notebook_carries_exactly_the_generated_badge_and_install_cell(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        nb = json.load(f)
    assert colab.problems(nb, rel) == []
    assert f"/blob/main/{rel})" in colab.badge(rel)


def test_problems_catches_a_missing_badge_a_stale_cell_and_a_second_install_cell():
    rel = "exercises/00_start_here.ipynb"
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        good = json.load(f)
    no_badge = json.loads(json.dumps(good))
    no_badge["cells"][0]["source"] = ["# 00 · Start here — workbook\n"]
    assert "exactly one Colab badge" in colab.problems(no_badge, rel)[0]
    wrong_link = json.loads(json.dumps(good))
    assert colab.problems(wrong_link, "solutions/00_start_here.ipynb")  # the badge opens another path
    stale = json.loads(json.dumps(good))
    code = next(c for c in stale["cells"] if c["cell_type"] == "code")
    code["source"] = [line.replace('"-q", ', "") for line in code["source"]]
    assert code["source"] != next(c for c in good["cells"] if c["cell_type"] == "code")["source"]
    assert "differs from the generated one" in colab.problems(stale, rel)[0]
    twice = json.loads(json.dumps(good))
    twice["cells"].insert(5, json.loads(json.dumps(code)))
    assert "found 2" in colab.problems(twice, rel)[0]
    # apply() repairs all of them, and applying twice changes nothing.
    for broken in (no_badge, stale, twice):
        fixed = colab.apply(broken, rel)
        assert colab.problems(fixed, rel) == [] and colab.dumps(colab.apply(fixed, rel)) == colab.dumps(fixed)


def test_apply_keeps_outputs_and_execution_counts_of_executed_notebooks():
    rel = "notebooks/05_triton.ipynb"
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        text = f.read()
    nb = json.loads(text)
    assert sum(bool(c.get("outputs")) for c in nb["cells"]) > 5  # committed with its H100 outputs
    assert colab.dumps(colab.apply(json.loads(text), rel)) == text  # already applied: byte for byte the same
    nb["cells"] = [c for c in nb["cells"] if c.get("id") != colab.CELL_ID]  # as before this module
    again = colab.apply(nb, rel)
    # every other cell as committed, outputs and counts included; the install cell comes back as a fresh one (the
    # committed notebook's was executed with the rest on the GPU: its count and output are the run's)
    want = json.loads(text)
    for cell in want["cells"]:
        if cell.get("id") == colab.CELL_ID:
            cell.update(execution_count=None, outputs=[], metadata={})
    assert colab.dumps(again) == colab.dumps(want)


def test_check_command_passes_on_the_repository():
    proc = subprocess.run([sys.executable, "-m", "gpucourse.colab", "--check"], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def _pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def test_the_repository_url_is_written_once_and_used_by_every_badge_and_cell():
    url = _pyproject()["urls"]["Repository"]
    assert colab.repository() == url
    for rel in NOTEBOOKS:
        cell = _install_cell(rel)
        assert f'"{url}"' in cell and cell == colab.install_source(), rel


def test_the_dependencies_are_light_and_lab_and_test_are_extras():
    project = _pyproject()
    extras = project["optional-dependencies"]
    base = {_name(r) for r in project["dependencies"]}
    assert base and not base & LAB_AND_TEST, "a notebook host must not get jupyterlab, nbval or pytest"
    assert {"jupyterlab", "ipykernel"} <= {_name(r) for r in extras["lab"]}
    assert {"nbval", "pytest", "pytest-xdist", "playwright"} <= {_name(r) for r in extras["test"]}
    assert colab.lesson_requirements() == project["dependencies"]


# Import name -> distribution; None: provided by the Jupyter kernel or optional (imported under try).
_DIST = {"torch": "torch", "triton": "triton", "numpy": "numpy", "matplotlib": "matplotlib",
         "ipywidgets": "ipywidgets", "gpucourse": None, "IPython": None, "torchao": None,
         "transformers": None}
# Kit modules that are tools for the repository, not for the lessons (nbformat, tomli: the notebook generators).
_DEV_ONLY = {os.path.join("gpucourse", "workbooks.py"), os.path.join("gpucourse", "colab.py")}


def _imports(source: str) -> set:
    tree = ast.parse("\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out - set(sys.stdlib_module_names)


def test_the_dependencies_cover_everything_the_kit_and_the_notebooks_import():
    lessons = {_name(r) for r in colab.lesson_requirements()}
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "gpucourse")):
        for f in files:
            path = os.path.join(folder, f)
            if f.endswith(".py") and os.path.relpath(path, ROOT) not in _DEV_ONLY:
                for mod in _imports(open(path, encoding="utf-8").read()):
                    found.setdefault(mod, os.path.relpath(path, ROOT))
    for rel in NOTEBOOKS:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            for c in json.load(f)["cells"]:
                if c["cell_type"] == "code":
                    for mod in _imports("".join(c["source"])):
                        found.setdefault(mod, rel)
    unknown = {m: where for m, where in found.items() if m not in _DIST}
    assert not unknown, f"imported but not in the dependencies (or _DIST): {unknown}"
    missing = {_DIST[m] for m in found if _DIST[m]} - lessons
    assert not missing, f"the dependencies lack {sorted(missing)}"
    assert "ninja" in lessons  # not imported: torch's C++ extension builder (lesson 04) runs it


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, cmd, **kwargs):
        self.calls.append(list(cmd))
        return subprocess.CompletedProcess(cmd, 0)


def _run_cell(source: str, monkeypatch, colab_marker: bool) -> _Recorder:
    rec = _Recorder()
    monkeypatch.setattr(subprocess, "run", rec)
    monkeypatch.setattr(sys, "path", list(sys.path))
    if colab_marker:
        monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-simulated")
    else:
        monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(source, "<install cell>", "exec"), {"__name__": "__main__"})
    return rec


def test_install_cell_does_nothing_off_colab(monkeypatch, capsys):
    before = list(sys.path)
    rec = _run_cell(_install_cell("exercises/05_triton.ipynb"), monkeypatch, colab_marker=False)
    assert rec.calls == [] and sys.path == before
    assert capsys.readouterr() == ("", "")


def test_install_cell_on_colab_issues_clone_and_the_light_pip_commands(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    rec = _run_cell(_install_cell("solutions/05_triton.ipynb"), monkeypatch, colab_marker=True)
    course = str(tmp_path / "gpucourse")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    assert rec.calls == [["git", "clone", "-q", "--depth", "1", colab.repository(), course],
                         pip + ["-e", course]]
    assert sys.path[0] == course  # the running kernel can import the course without a restart
    flat = {_name(a) for call in rec.calls for a in call}
    assert not flat & {"jupyterlab", "nbval", "pytest", "pytest-xdist", "playwright"}
    # google.colab loaded (what Colab's kernel does) is the same marker.
    monkeypatch.delenv("COLAB_RELEASE_TAG")
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    (tmp_path / "gpucourse").mkdir()  # already cloned: re-running the cell does not clone again
    rec2 = _Recorder()
    monkeypatch.setattr(subprocess, "run", rec2)
    exec(compile(_install_cell("notebooks/05_triton.ipynb"), "<install cell>", "exec"), {})
    assert rec2.calls == rec.calls[1:]


def test_on_a_fresh_colab_like_venv_the_first_cells_run(tmp_path):
    """A fresh venv that sees the packages a Colab runtime brings (torch, numpy, matplotlib...; here this venv's,
    through a .pth file) but not gpucourse: the install cell, with the Colab marker set and this repository as the
    URL (a local clone: offline), installs the course; the notebook's next cell imports it from the clone."""
    if subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the install cell clones the repository")
    venv_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv_dir)],
                   check=True)
    py = venv_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "colab_runtime_preinstalled.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(py), "-c", "import gpucourse"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0, "the fresh venv must not see gpucourse before the install cell runs"

    rel = "exercises/00_start_here.ipynb"
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        code = ["".join(c["source"]) for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    assert code[0] == colab.install_source()
    cell = colab.install_source(url="file://" + ROOT)  # the same cell, this checkout as the repository
    script = tmp_path / "first_cells.py"
    script.write_text(cell + "\n\n" + code[1] + "\n\nprint('imported from', gpucourse.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(COLAB_RELEASE_TAG="release-colab-simulated", PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0",
               PIP_DISABLE_PIP_VERSION_CHECK="1", GPUCOURSE_MODE="cpu")
    run = tmp_path / "content"
    run.mkdir()
    proc = subprocess.run([str(py), str(script)], capture_output=True, text=True, cwd=run, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    clone = run / os.path.basename(ROOT.rstrip("/"))
    assert f"imported from {clone / 'gpucourse' / '__init__.py'}" in proc.stdout
    assert "CPU mode" in proc.stdout  # setup() printed its mode line
    listed = subprocess.run([str(py), "-m", "pip", "list", "--path", site, "--format", "json"],
                            capture_output=True, text=True, env=env, check=True).stdout
    assert {d["name"].lower() for d in json.loads(listed)} == {"gpucourse"}  # nothing else landed in the venv
