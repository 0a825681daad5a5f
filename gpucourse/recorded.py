"""Curated recorded results: what a lesson shows from a committed GPU run where it cannot measure (CPU mode, counters
not permitted, a single GPU), one file per lesson and GPU with stable keys.

``benchmarks/results/recorded/<gpu>-<lesson>.json`` holds::

    {"lesson": "l06_tensor_cores", "gpu": "h100", "environment": {...the run's versions...},
     "sources": [{"file": "lab/results/h100-explore-tensor-cores.json", "commit": "cb91420"}, ...],
     "keys": {"ladder": "the 8192³ matmul ladder: rows of {name, us, tflops}", ...},
     "values": {"ladder": [...], ...}}

A lesson reads it with :func:`load` and indexes it by a declared key only: a key the file does not declare raises a
``KeyError`` naming the declared ones, so renaming an exploration's configuration can never silently change what a
lesson prints. The file is written by a lesson's promote step (``python -m gpucourse.lessons.<lesson>.recorded
promote``), which maps a run's labels to the stable keys once, through :func:`promote`.
"""
from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping


def recorded_dir() -> str:
    """``benchmarks/results/recorded/`` of the checkout (or of the installed course's data)."""
    from .benchmarks import results_dir

    return os.path.join(results_dir(), "recorded")


def path_for(lesson: str, gpu: str = "h100") -> str:
    return os.path.join(recorded_dir(), f"{gpu}-{lesson}.json")


class Recorded(Mapping):
    """A lesson's curated recorded values: a read-only mapping over the declared keys, with the run's environment."""

    def __init__(self, doc: dict, path: str):
        keys, values = doc.get("keys") or {}, doc.get("values") or {}
        if set(keys) != set(values):
            raise ValueError(f"{path}: declared keys and values differ: only declared {sorted(set(keys) - set(values))}"
                             f", only in values {sorted(set(values) - set(keys))}")
        self.doc, self.path = doc, path
        self.lesson, self.gpu = doc.get("lesson"), doc.get("gpu")
        self.environment = doc.get("environment") or {}
        self.sources = doc.get("sources") or []
        self.keys_described = dict(keys)

    def __getitem__(self, key: str):
        values = self.doc["values"]
        if key not in values:
            raise KeyError(f"{os.path.basename(self.path)} declares no key {key!r}; declared: {sorted(values)}")
        return values[key]

    def __iter__(self):
        return iter(self.doc["values"])

    def __len__(self) -> int:
        return len(self.doc["values"])

    def label(self) -> str:
        """"recorded on an H100 80GB HBM3 (torch 2.11.0+cu130, triton 3.6.0), not measured here"."""
        env = self.environment
        return (f"recorded on an {env.get('gpu', self.gpu or 'H100')} (torch {env.get('torch', '?')}, "
                f"triton {env.get('triton', '?')}), not measured here")


def load(lesson: str, gpu: str = "h100") -> Recorded:
    """The curated recorded values of ``lesson`` (its folder name, e.g. ``"l06_tensor_cores"``) on ``gpu``."""
    path = path_for(lesson, gpu)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no recorded results for {lesson} on {gpu}: {path} is missing (written by "
                                f"`python -m gpucourse.lessons.{lesson}.recorded promote`)")
    with open(path) as f:
        return Recorded(json.load(f), path)


def source(rel: str, root: str | None = None) -> dict:
    """``{"file": rel, "commit": ...}`` for a promote step's ``sources``: the last commit that added or changed the
    contents of the file at ``rel`` (relative to the checkout; a later move does not count, so the answer survives
    the file moving), or, before the file is committed at all, the last commit that held its exact contents under
    any path; ``"uncommitted"`` if none did."""
    if root is None:
        from .workbooks import ROOT as root

    def git(*args):
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True).stdout.strip()

    found = git("log", "-1", "--follow", "--diff-filter=AM", "--format=%h", "--name-only", "--", rel).splitlines()
    commit = found[0] if found else ""
    if commit and git("rev-parse", f"{commit}:{found[-1]}") != git("rev-parse", f"HEAD:{rel}"):
        # --follow took another file of similar text for this one's earlier self (two runs of one benchmark): the
        # commit that last changed this path itself, then
        commit = git("log", "-1", "--diff-filter=AM", "--format=%h", "--", rel)
    if not commit:
        blob = git("hash-object", rel)
        commit = git("log", "-1", "--format=%h", f"--find-object={blob}") if blob else ""
    return {"file": rel, "commit": commit or "uncommitted"}


def promote(lesson: str, values: dict, keys: dict, sources: list, environment: dict | None = None,
            gpu: str = "h100") -> str:
    """Write ``lesson``'s curated file: ``values`` under the stable ``keys`` (key -> one-line description), with
    the ``sources`` they were taken from (``{"file": ..., "commit": ...}``) and the run's ``environment``. Returns
    the path. Raises ``ValueError`` if ``values`` and ``keys`` name different keys."""
    if set(values) != set(keys):
        raise ValueError(f"values and keys differ: {sorted(set(values) ^ set(keys))}")
    doc = {"lesson": lesson, "gpu": gpu, "environment": environment or {}, "sources": list(sources),
           "keys": dict(sorted(keys.items())), "values": {k: values[k] for k in sorted(values)}}
    path = path_for(lesson, gpu)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, path)
    return path
