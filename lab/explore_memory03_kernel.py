#!/usr/bin/env python3
"""Lesson 03 in a Jupyter kernel, cell by cell, to find where its Restart & Run All stalls (issue #18 §2).

The lesson's measurements ran in 45 s as a plain script (``explore_memory03.py``, stage times in
``results/h100-explore-memory03.json``), but executing the notebook through the GPU suite ran past 300 s on a fresh
H100 without finishing. This executes ``notebooks/03_memory_hierarchy.ipynb`` (or the notebook given) with nbclient,
as the suite does, with

- a first, injected cell that makes the kernel dump every thread's stack to ``$OUT/faulthandler-kernel.txt`` every
  ``--dump-every`` seconds (so a hang shows where it is),
- a time limit per cell (``--cell-timeout``),
- each finished cell's seconds written to ``$OUT/h100-explore-memory03-kernel.json`` as it finishes.

Nothing is written back into the notebook. Usage (on the GPU machine):
    python3 lab/explore_memory03_kernel.py [--notebook PATH] [--cell-timeout 100] [--dump-every 40]
"""
from __future__ import annotations

import argparse
import json
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    import nbformat
    from nbclient import NotebookClient

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notebook", default="notebooks/03_memory_hierarchy.ipynb")
    ap.add_argument("--cell-timeout", type=int, default=100)
    ap.add_argument("--dump-every", type=int, default=40)
    ap.add_argument("--plain", action="store_true", help="nbclient's own NotebookClient (the explorer cell then "
                                                         "blocked until its limit on the H100: nbclient#312)")
    args = ap.parse_args(argv)
    out = os.environ.get("OUT", ".")
    report_path = os.path.join(out, "h100-explore-memory03-kernel.json")
    nb = nbformat.read(os.path.join(ROOT, args.notebook), as_version=4)
    dump = os.path.join(out, "faulthandler-kernel.txt")
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        "import faulthandler\n"
        f"faulthandler.dump_traceback_later({args.dump_every}, repeat=True, file=open({dump!r}, 'w'))"))
    report = {"notebook": args.notebook, "cells": [], "error": None}
    t_cell = [time.perf_counter()]

    def save():
        with open(report_path, "w") as f:
            json.dump(report, f, indent=1)

    def started(cell, cell_index, **kw):
        if cell.cell_type != "code":
            return
        t_cell[0] = time.perf_counter()
        report["running"] = {"index": cell_index, "first_line": (cell.source.splitlines() or [""])[0][:120]}
        save()

    def executed(cell, cell_index, **kw):
        if cell.cell_type != "code":
            return
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if "text" in o)
        report["cells"].append({"index": cell_index, "seconds": round(time.perf_counter() - t_cell[0], 2),
                                "first_line": (cell.source.splitlines() or [""])[0][:120], "output_tail": text[-400:]})
        report.pop("running", None)
        save()

    make = NotebookClient
    if not args.plain:  # the GPU suite's client, which polls for each cell's reply in steps (nbclient#312)
        import importlib.util  # benchmarks/gpu_suite.py is a script, not a module of the package: load it by path

        spec = importlib.util.spec_from_file_location("gpu_suite", os.path.join(ROOT, "benchmarks", "gpu_suite.py"))
        gpu_suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gpu_suite)
        make = gpu_suite.notebook_client
    client = make(nb, timeout=args.cell_timeout, kernel_name="python3",
                  resources={"metadata": {"path": ROOT}}, on_cell_start=started, on_cell_executed=executed)
    t0 = time.perf_counter()
    try:
        client.execute()
    except Exception as e:  # a cell over its limit, a dead kernel: say which, keep the report
        report["error"] = f"{type(e).__name__}: {str(e)[-1500:]}"
    report["total_seconds"] = round(time.perf_counter() - t0, 1)
    save()
    for c in report["cells"]:
        print(f"[{c['index']:>2}] {c['seconds']:7.2f} s  {c['first_line']}")
    if report.get("running"):
        print("stalled in:", report["running"])
    print("error:", report["error"], "| total", report["total_seconds"], "s")
    return 0 if report["error"] is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
