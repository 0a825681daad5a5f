"""The repository's scripts (benchmarks/*.py are not a package) loaded as modules, for tests of their functions."""
from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(relpath: str, name: str | None = None):
    """The module of the script at ``relpath`` (from the repository root), executed under ``name``."""
    path = os.path.join(ROOT, relpath)
    spec = importlib.util.spec_from_file_location(name or os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
