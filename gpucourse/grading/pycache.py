"""Compiled bytecode for the grading workers, where the installed packages carry none (issue 17, throughput).

Every grading worker is a fresh Python that imports torch, and a CUDA submission has two (the compile ahead and the
graded one). Python reads each module's compiled bytecode from ``__pycache__`` beside its source; where the install
left none (``pip install --no-compile``, or an image built with ``PYTHONDONTWRITEBYTECODE`` set, as on the course's
H100 machine, where torch has no ``__pycache__`` at all), every import compiles every module again, and workers
cannot keep what they compile (they run with ``PYTHONDONTWRITEBYTECODE`` and a read-only view of the system). There
``import torch`` took 6.2 s of CPU per worker (``benchmarks/results/h100-grading-cpu.json``).

So, before its workers start, the grader checks whether the modules a worker imports have valid bytecode beside
them. Where more than a few do not, it compiles them once (per machine, Python and set of packages; kept in the
grader's cache like the precompiled headers) into a folder of its own and gives workers ``PYTHONPYCACHEPREFIX``
pointing there, bound read-only into their sandboxes: Python then reads bytecode from that tree instead of from
``__pycache__``. Nothing else changes. Python still checks each file against its source (modification time and
size), so a package changed since is compiled again in memory, as without this, and a worker can neither write
there nor change what the next worker reads.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

PREFIX_ENV = "PYTHONPYCACHEPREFIX"
MISSING_AT_MOST = 0.05  # where at most this fraction of a worker's modules lacks bytecode, nothing is prepared
DONE = "gpucourse_pycache.json"  # written last: a folder without it is unfinished

_prepared: dict = {}


def worker_modules() -> list:
    """The source files of the modules a grading worker imports, as this process has them loaded after importing
    what a worker imports first (the course, torch, the worker and what it loads lazily, torch's extension
    builder)."""
    import gpucourse  # noqa: F401
    import torch  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401
    from . import checker, judging, launches, protocol, worker  # noqa: F401

    bases = [os.path.join(os.path.abspath(p), "") for p in sys.path if p and os.path.isdir(p)]
    files = set()
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if isinstance(path, str) and path.endswith(".py") and os.path.isfile(path):
            path = os.path.abspath(path)
            if any(path.startswith(b) for b in bases):  # importable as a worker imports it (not a file run by path)
                files.add(path)
    return sorted(files)


HEAVY = ("torch", "numpy", "triton")  # what most of a worker's import time goes to: the packages the check weighs


def heavy(files: list) -> list:
    """The files of ``files`` inside the packages of :data:`HEAVY` (all of ``files`` where none is)."""
    marks = tuple(f"{os.sep}{name}{os.sep}" for name in HEAVY)
    inside = [f for f in files if any(m in f for m in marks)]
    return inside or list(files)


def has_bytecode(source: str) -> bool:
    """Whether ``source`` has bytecode in its ``__pycache__`` that this Python would use: its magic number, and
    the source's modification time and size in the header (or a hash-based file, which Python checks itself)."""
    try:
        with open(_beside(source), "rb") as f:
            head = f.read(16)
        if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
            return False
        flags, mtime, size = struct.unpack("<III", head[4:16])
        if flags & 1:  # hash based
            return True
        st = os.stat(source)
        return mtime == (int(st.st_mtime) & 0xFFFFFFFF) and size == (st.st_size & 0xFFFFFFFF)
    except (OSError, ValueError, NotImplementedError):
        return False


def _beside(source: str) -> str:
    """The __pycache__ path of ``source`` as Python computes it with no prefix set."""
    saved = sys.pycache_prefix
    sys.pycache_prefix = None
    try:
        return importlib.util.cache_from_source(source)
    finally:
        sys.pycache_prefix = saved


def missing_fraction(files: list) -> float:
    """The fraction of ``files`` with no usable bytecode beside them (0 for no files)."""
    return sum(not has_bytecode(f) for f in files) / len(files) if files else 0.0


def roots(files: list) -> list:
    """What to compile: each package's top folder (a worker may import more of torch later than this process has:
    the whole package is compiled), and the single-file modules themselves (the standard library's)."""
    out = set()
    for f in files:
        parent = os.path.dirname(f)
        if not os.path.exists(os.path.join(parent, "__init__.py")):
            out.add(f)
            continue
        while os.path.exists(os.path.join(os.path.dirname(parent), "__init__.py")):
            parent = os.path.dirname(parent)
        out.add(parent)
    return sorted(out)


def _folder(key_parts) -> str:
    """In the grader's cache, beside its other shared folders (cuda_build's), named after the key."""
    from .. import cuda_build

    root = os.path.dirname(cuda_build.cache_dir())  # $GPUCOURSE_CACHE or ~/.cache/gpucourse
    return os.path.join(root, "shared", "pycache_" + cuda_build._hash(json.dumps(key_parts, sort_keys=True)))


def _valid(folder: str, key_parts) -> bool:
    try:
        with open(os.path.join(folder, DONE)) as f:
            return json.load(f).get("key") == key_parts
    except (OSError, ValueError):
        return False


def prepare(verbose: bool = False, force: bool = False, say=None) -> str | None:
    """The bytecode folder for workers (see the module's docstring), compiled here unless a valid one is in the
    cache; None where the installed packages have their bytecode already (nothing to do: ``force`` compiles anyway)
    or the compile failed. Workers get it through :func:`worker_env` and :func:`worker_binds`."""
    _prepared.pop("folder", None)
    files = worker_modules()
    # Weighed on torch's, numpy's and triton's modules: whatever else this process imported (a test run's own
    # modules, say) does not decide it, and those three are most of a worker's import time.
    gap = missing_fraction(heavy(files))
    _prepared["missing"] = round(gap, 3)
    if gap <= MISSING_AT_MOST and not force:
        return None
    targets = roots(files)
    stamps = {}
    for t in targets:
        try:
            st = os.stat(t)
            stamps[t] = [st.st_mtime_ns, st.st_size]
        except OSError:
            pass
    key_parts = {"python": sys.version, "executable": sys.executable, "roots": stamps}
    folder = _folder(key_parts)
    if not _valid(folder, key_parts):
        if say is not None:
            say(f"compiling bytecode for the grading workers ({gap:.0%} of torch's modules have none here; once per "
                f"machine, kept in {os.path.dirname(folder)})")
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="pycache_tmp_", dir=os.path.dirname(folder))
        env = dict(os.environ, **{PREFIX_ENV: tmp})
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cmd = [sys.executable, "-m", "compileall", "-q", "-q", "-j", "0", *stamps]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # A file that does not compile (a template, a Python-2 test in some package) makes compileall exit 1 and
        # is compiled by the worker that imports it, as before; what matters is that the rest was written.
        count = sum(len(fs) for _, _, fs in os.walk(tmp))
        if verbose:
            print(f"compiled {count} modules for the workers into {folder} (exit {proc.returncode})")
        if count == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            return None
        with open(os.path.join(tmp, DONE), "w") as f:
            json.dump({"key": key_parts, "files": count}, f)
        for dirpath, dirs, fs in os.walk(tmp):
            for name in dirs:
                os.chmod(os.path.join(dirpath, name), 0o755)
            for name in fs:
                os.chmod(os.path.join(dirpath, name), 0o444)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, folder)  # whole, so a reader never sees half of one; another grader's is as good
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        if not _valid(folder, key_parts):
            return None
    _prepared["folder"] = folder
    return folder


def worker_env() -> dict:
    """``PYTHONPYCACHEPREFIX`` for the workers where :func:`prepare` made a folder in this process."""
    return {PREFIX_ENV: _prepared["folder"]} if _prepared.get("folder") else {}


def worker_binds() -> list:
    """The folder to show a sandboxed worker read-only, at the same path."""
    return [_prepared["folder"]] if _prepared.get("folder") else []


def status() -> dict:
    """For reports and ``gpucourse doctor``: how much of a worker's imports lacked bytecode, and the folder used."""
    return {"missing_bytecode": _prepared.get("missing"), "folder": _prepared.get("folder")}
