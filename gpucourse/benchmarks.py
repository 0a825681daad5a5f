"""Registered benchmarks: `gpucourse bench` runs them and writes one JSON file per device.

A benchmark is a function that measures and returns a dict with its figures and, where the course sets a performance
target, a list of ``target(...)`` entries (a measured ratio against its goal). Lessons register theirs in a module of
``gpucourse/bench_suites/``; every module there is imported when the registry is read.
"""
from __future__ import annotations

import datetime
import importlib
import json
import operator
import pkgutil
import sys
import time
import traceback

from . import device, env

_REGISTRY: dict = {}


def register(name: str, lesson: str, gpu_only: bool = True):
    """Decorator: add ``fn() -> dict`` to the registry under ``name`` (unique), for lesson ``lesson``."""
    def wrap(fn):
        if name in _REGISTRY and _REGISTRY[name]["fn"] is not fn:
            raise ValueError(f"benchmark {name!r} is registered twice")
        _REGISTRY[name] = {"fn": fn, "lesson": lesson, "gpu_only": gpu_only}
        return fn
    return wrap


def target(name: str, value: float, goal: float, op: str = ">=") -> dict:
    """One performance target: ``value op goal`` (e.g. ratio to peer >= 0.9)."""
    cmp = {">=": operator.ge, "<=": operator.le}[op]
    return {"name": name, "value": value, "goal": goal, "op": op, "met": bool(cmp(value, goal))}


def registry() -> dict:
    import gpucourse.bench_suites as suites

    for mod in pkgutil.iter_modules(suites.__path__):
        importlib.import_module(f"{suites.__name__}.{mod.name}")
    return dict(sorted(_REGISTRY.items(), key=lambda kv: (kv[1]["lesson"], kv[0])))


def run(names=None, out: str | None = None, log=print) -> dict:
    """Run the named benchmarks (all by default) and return (and optionally write) the results document."""
    reg = registry()
    unknown = set(names or []) - set(reg)
    if unknown:
        raise KeyError(f"unknown benchmark(s): {sorted(unknown)}; known: {sorted(reg)}")
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "environment": env.versions(), "results": {}}
    for name, entry in reg.items():
        if names and name not in names:
            continue
        if entry["gpu_only"] and not device.on_gpu():
            log(f"[skip] {name}: needs a GPU (CPU mode)")
            doc["results"][name] = {"skipped": "needs a GPU"}
            continue
        log(f"[run ] {name} (lesson {entry['lesson']}) ...")
        t0 = time.perf_counter()
        try:
            res = entry["fn"]()
        except Exception:  # one broken benchmark must not lose the others' results
            res = {"error": traceback.format_exc()}
            log(res["error"])
        res["lesson"] = entry["lesson"]
        res["seconds"] = round(time.perf_counter() - t0, 2)
        doc["results"][name] = res
    log(summary(doc))
    if out:
        with open(out, "w") as f:
            json.dump(doc, f, indent=1, default=str)
        log(f"wrote {out}")
    return doc


def summary(doc: dict) -> str:
    lines = [f"benchmarks on {env.fingerprint(doc['environment'])}"]
    for name, res in doc["results"].items():
        if "skipped" in res or "error" in res:
            lines.append(f"  {name}: {'skipped (' + res['skipped'] + ')' if 'skipped' in res else 'ERROR'}")
            continue
        for t in res.get("targets", []):
            mark = "met " if t["met"] else "MISS"
            lines.append(f"  [{mark}] {name}: {t['name']} = {t['value']:.3f} (target {t['op']} {t['goal']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="gpucourse bench", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    ap.add_argument("--out", help="write the results JSON here (e.g. benchmarks/results/h100.json)")
    ap.add_argument("--list", action="store_true", help="list registered benchmarks and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, e in registry().items():
            print(f"{name:<28} lesson {e['lesson']}{'  (GPU only)' if e['gpu_only'] else ''}")
        return 0
    try:
        run(args.names or None, out=args.out)
    except KeyError as e:
        print(f"gpucourse bench: {e.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
