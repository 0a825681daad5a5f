"""What the notebooks' cells call in the course's package exists, with arguments its signature accepts.

CI runs every notebook in CPU mode, where the GPU-only cells (behind ``skip_unless_gpu``) do not run: a kit function
renamed or removed, or a keyword dropped from its signature, breaks those cells only on a GPU. Lesson 03's
working-set cell called ``roofline.plot_working_set`` for two sessions after a clean-up removed it, and only the H100
run found it. This reads every code cell of every notebook (lessons, solutions, exercises) without running it: each
name reached through the package's modules (``R.plot_working_set``, ``gpucourse.benchmarks.record``) must exist, and
each call of a package function must bind to its signature (how many positional arguments, which keywords).
"""
from __future__ import annotations

import ast
import glob
import importlib
import inspect
import json
import os
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "exercises")
                   for p in glob.glob(os.path.join(ROOT, d, "*.ipynb")))


def _cells(path: str) -> list:
    """The code cells' sources as Python, turned so the way IPython does it (magics and shell lines become
    ``get_ipython()`` calls), as the grader's worker reads a notebook."""
    from IPython.core.inputtransformer2 import TransformerManager

    from gpucourse.workbooks import code_cells

    return [TransformerManager().transform_cell(source) for source in code_cells(path)]


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _aliases(trees) -> dict:
    """Each name a notebook binds to one of the package's modules (``import gpucourse.roofline as R``, ``from
    gpucourse.lessons.l03_memory_hierarchy import measure``), to that module."""
    names = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "gpucourse":
                        if a.asname:
                            names[a.asname] = _import(a.name)
                        else:
                            names["gpucourse"] = _import("gpucourse")
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpucourse":
                parent = _import(node.module)
                for a in node.names:
                    obj = getattr(parent, a.name, None) if parent is not None else None
                    if obj is None:
                        obj = _import(f"{node.module}.{a.name}")
                    if isinstance(obj, types.ModuleType):
                        names[a.asname or a.name] = obj
    return {k: v for k, v in names.items() if v is not None}


def _resolve(node, names: dict):
    """(object, dotted text) that ``node`` (a Name or an Attribute chain) reaches through the package's modules, a
    missing name as (None, text), or (no object, "") where the chain leaves the package's modules."""
    if isinstance(node, ast.Name):
        return (names[node.id], node.id) if node.id in names else (..., "")
    if isinstance(node, ast.Attribute):
        base, text = _resolve(node.value, names)
        if not isinstance(base, types.ModuleType):
            return ..., ""
        text = f"{text}.{node.attr}"
        obj = getattr(base, node.attr, None)
        if obj is None:
            obj = _import(f"{base.__name__}.{node.attr}")
        return obj, text
    return ..., ""


def problems(path: str) -> list:
    trees = [ast.parse(src) for src in _cells(path)]
    names = _aliases(trees)
    found = []
    for tree in trees:
        # a name the notebook assigns itself (ws = ..., R = ...) is not the package's
        assigned = {t.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AugAssign, ast.For))
                    for t in ast.walk(node.target if hasattr(node, "target") else node.targets[0])
                    if isinstance(t, ast.Name)}
        local = {k: v for k, v in names.items() if k not in assigned}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                obj, text = _resolve(node, local)
                if obj is None:
                    found.append(f"line {node.lineno}: {text} does not exist")
            if isinstance(node, ast.Call):
                obj, text = _resolve(node.func, local)
                if not text or obj is None or not inspect.isfunction(obj):
                    continue
                if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                    continue
                try:
                    inspect.signature(obj).bind(*[None] * len(node.args), **{k.arg: None for k in node.keywords})
                except TypeError as exc:
                    found.append(f"line {node.lineno}: {text}(...): {exc}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: os.path.relpath(p, ROOT))
def test_what_a_notebook_calls_in_the_package_exists_and_takes_those_arguments(path):
    assert problems(path) == []


def test_a_removed_function_and_a_wrong_keyword_are_found(tmp_path):
    """The check itself: a cell that calls a function the package does not have, and one with a keyword its
    function does not take, are both reported; the right calls are not."""
    nb = {"cells": [{"cell_type": "code", "source": [
        "import gpucourse.roofline as R\n",
        "from gpucourse.lessons.l03_memory_hierarchy import measure\n",
        "if False:\n",
        "    R.plot_working_set([1], [2.0], None, ax=None)\n",
        "    R.no_such_plot([1])\n",
        "    measure.working_set(bench_kw={}, no_such_keyword=1)\n",
        "    R.gemv(1, 2, 3, 4, 5, 6)\n"]}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    found = problems(str(path))
    assert len(found) == 3, found
    assert "line 5: R.no_such_plot does not exist" in found
    assert any(f.startswith("line 6: measure.working_set(...): ") and "no_such_keyword" in f for f in found)
    assert any(f.startswith("line 7: R.gemv(...): ") and "too many positional" in f for f in found)
