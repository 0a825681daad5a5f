#!/usr/bin/env python3
"""Merge a results file produced on a GPU machine (e.g. from a gpu_suite ``--archive``) into the committed one.

Only what is named moves: whole benchmark entries (``--results NAME ...``) and the suite's per-notebook fields
(``--notebooks PATH ...``: their seconds and status; the over-budget list and ok flag are recomputed). Everything
else in the committed file stays, so runs of different lessons on the same GPU can be merged one after the other.
The write holds a lock (several people or agents may merge at once) and is atomic.

  python3 benchmarks/merge_results.py /tmp/run/benchmarks/results/h100.json --results quant07_gemv \
      --notebooks notebooks/07_quantization.ipynb solutions/07_quantization.ipynb
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
from pathlib import Path

from gpu_suite import notebook_summary  # benchmarks/gpu_suite.py, found beside this script

from gpucourse import benchmarks

ROOT = Path(__file__).resolve().parent.parent


def merge(src: dict, dst: dict, results: list, notebooks: list) -> list:
    """Copy the named entries of ``src`` into ``dst`` in place; return what was copied (names missing from
    ``src`` raise KeyError: a merge that silently moved nothing would hide a failed run)."""
    moved = []
    for name in results:
        if name not in src.get("results", {}):
            raise KeyError(f"{name!r} is not among the source's results: {sorted(src.get('results', {}))}")
        dst.setdefault("results", {})[name] = src["results"][name]
        moved.append(name)
    s_suite, d_suite = src.get("suite", {}), dst.setdefault("suite", {})
    for nb in notebooks:
        seconds = s_suite.get("notebook_seconds", {})
        if nb not in seconds:
            raise KeyError(f"{nb!r} has no notebook_seconds in the source: {sorted(seconds)}")
        d_suite.setdefault("notebook_seconds", {})[nb] = seconds[nb]
        if nb in s_suite.get("notebook_status", {}):
            d_suite.setdefault("notebook_status", {})[nb] = s_suite["notebook_status"][nb]
        moved.append(nb)
    if notebooks:  # the summary follows the merged figures
        d_suite.update(notebook_summary(d_suite["notebook_seconds"], d_suite.get("notebook_status", {})))
    if moved and src.get("environment"):
        dst["environment"] = src["environment"]
    return moved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="the results file written on the GPU machine")
    ap.add_argument("--into", default=str(ROOT / "benchmarks" / "results" / "h100.json"))
    ap.add_argument("--results", nargs="*", default=[], help="benchmark entries to copy")
    ap.add_argument("--notebooks", nargs="*", default=[], help="notebooks whose suite fields to copy")
    args = ap.parse_args(argv)
    with open(args.source) as f:
        src = json.load(f)
    lock_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpucourse-merge-results.lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        dst = benchmarks._read_results(args.into)
        moved = merge(src, dst, args.results, args.notebooks)
        benchmarks._write_results(args.into, dst)
    print(f"merged into {os.path.relpath(args.into)}: {', '.join(moved) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
