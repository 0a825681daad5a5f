"""gpucourse.grading.pycache: bytecode the grader compiles for its workers where the installed packages have none."""
import json
import os
import py_compile
import subprocess
import sys

import pytest

from gpucourse.grading import pycache, sandbox


def _module(tmp_path, name="gpc_probe_mod", body="VALUE = 41 + 1\n"):
    pkg = tmp_path / "pkg" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner.py").write_text(body)
    return pkg


def test_has_bytecode_is_true_only_for_a_pyc_that_matches_its_source(tmp_path):
    pkg = _module(tmp_path)
    src = str(pkg / "inner.py")
    assert not pycache.has_bytecode(src)  # none written yet
    py_compile.compile(src, cfile=pycache._beside(src))
    assert pycache.has_bytecode(src)
    assert pycache.missing_fraction([src]) == 0.0
    with open(src, "a") as f:  # the source changed: Python would not use that file
        f.write("OTHER = 1\n")
    assert not pycache.has_bytecode(src)
    assert pycache.missing_fraction([src, src]) == 1.0
    assert pycache.missing_fraction([]) == 0.0


def test_roots_are_the_top_package_folders_and_the_single_modules(tmp_path):
    pkg = _module(tmp_path)
    sub = pkg / "sub"
    sub.mkdir()
    (sub / "__init__.py").write_text("")
    (sub / "deep.py").write_text("")
    single = tmp_path / "single.py"
    single.write_text("")
    got = pycache.roots([str(sub / "deep.py"), str(pkg / "inner.py"), str(single)])
    assert got == sorted([str(pkg), str(single)])


@pytest.fixture(autouse=True)
def _own_state(monkeypatch):
    monkeypatch.setattr(pycache, "_prepared", {})  # what a test prepares is not left to later tests' workers


def test_the_check_weighs_the_heavy_packages_and_modules_a_worker_can_import(tmp_path, monkeypatch):
    """Whether to compile is decided on torch's, numpy's and triton's modules (a test run's own modules, without
    bytecode, once made a CI grade compile everything); files run by path (not under sys.path) are not a worker's."""
    sep = os.sep
    files = [f"{sep}a{sep}torch{sep}nn.py", f"{sep}a{sep}numpy{sep}core.py", f"{sep}a{sep}mine.py"]
    assert pycache.heavy(files) == files[:2]
    assert pycache.heavy(files[2:]) == files[2:]
    stray = tmp_path / "ran_by_path.py"
    stray.write_text("X = 1\n")
    monkeypatch.setitem(sys.modules, "gpc_stray", type(sys)("gpc_stray"))
    sys.modules["gpc_stray"].__file__ = str(stray)
    got = pycache.worker_modules()
    assert str(stray) not in got and any(f"{sep}torch{sep}" in f for f in got)


def test_nothing_is_prepared_where_the_installed_packages_have_their_bytecode(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUCOURSE_CACHE", str(tmp_path))
    monkeypatch.setattr(pycache, "missing_fraction", lambda files: 0.0)
    assert pycache.prepare() is None
    assert pycache.worker_env() == {} and pycache.worker_binds() == []
    assert not (tmp_path / "shared").exists()


def test_prepared_bytecode_is_read_only_and_what_a_worker_python_loads(monkeypatch, tmp_path):
    """A folder is compiled for the modules this process has loaded, its files read-only; a fresh Python given it
    as PYTHONPYCACHEPREFIX (with PYTHONDONTWRITEBYTECODE, as workers run) loads a module's code from there (``-v``
    names the file), and a second prepare finds it ready instead of compiling again."""
    pkg = _module(tmp_path)
    monkeypatch.setenv("GPUCOURSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(pkg.parent))
    __import__("gpc_probe_mod.inner")
    said = []
    folder = pycache.prepare(force=True, say=said.append)
    assert folder and os.path.isdir(folder)
    assert len(said) == 1 and said[0].startswith("compiling bytecode for the grading workers"), said
    assert pycache.worker_env() == {pycache.PREFIX_ENV: folder}
    assert pycache.worker_binds() == [folder]
    with open(os.path.join(folder, pycache.DONE)) as f:
        assert json.load(f)["files"] > 10
    mine = os.path.join(folder, str(pkg / "inner.py").lstrip(os.sep).rsplit(".", 1)[0] +
                        f".{sys.implementation.cache_tag}.pyc")
    assert os.path.exists(mine), mine
    assert not os.access(mine, os.W_OK) or os.geteuid() == 0  # root ignores modes; the sandbox binds it read-only
    assert oct(os.stat(mine).st_mode & 0o777) == oct(0o444)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(pkg.parent), **pycache.worker_env())
    proc = subprocess.run([sys.executable, "-v", "-c", "import gpc_probe_mod.inner as m; print(m.VALUE)"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "42", proc.stderr[-2000:]
    assert f"code object from '{mine}'" in proc.stderr, proc.stderr[-3000:]
    assert not (pkg / "__pycache__").exists()  # nothing was written beside the source
    calls = []
    monkeypatch.setattr(pycache.subprocess, "run", lambda *a, **k: calls.append(a))
    assert pycache.prepare(force=True, say=said.append) == folder and calls == []  # ready: not compiled again
    assert len(said) == 1  # and nothing said


@pytest.mark.skipif(not sandbox.detect("auto").sandboxed, reason="bubblewrap is not usable here")
def test_the_sandbox_binds_the_prepared_folder_read_only(monkeypatch, tmp_path):
    folder = tmp_path / "pyc"
    folder.mkdir()
    pycache._prepared["folder"] = str(folder)
    iso = sandbox.detect("auto")
    cmd = sandbox.command(iso, ["true"], str(tmp_path), None, False)
    pairs = list(zip(cmd, cmd[1:], cmd[2:]))
    assert ("--ro-bind", str(folder), str(folder)) in pairs
    assert ("--bind", str(folder), str(folder)) not in pairs
