"""Registered benchmarks: `gpucourse bench` runs them and writes one JSON file per device.

A benchmark is a function that measures and returns a dict with its figures and, where the course sets a performance
target, a list of ``target(...)`` entries (a measured ratio against its goal). Each lesson registers its own in its
``bench.py`` (``gpucourse/lessons/lNN_topic/bench.py``); every lesson's ``bench`` is imported when the registry is
read, and a benchmark belongs to the lesson whose folder defines it.

A benchmark may instead register its targets apart (``register(..., targets=fn)``, ``fn(result) -> [target...]``).
Then a lesson that measures the same thing in its own cells (so the learner sees the code run) hands its result to
:func:`record`: the targets are evaluated and shown the same way, and when ``$GPUCOURSE_RECORD`` names a JSON file
(the GPU suite sets it while it executes the lessons) the result is merged into that file under the benchmark's
name. One measurement then serves both the committed lesson and the committed results file.
"""
from __future__ import annotations

import datetime
import json
import operator
import os
import sys
import time
import traceback

from . import device, env

_REGISTRY: dict = {}


def register(name: str, gpu_only: bool = True, targets=None):
    """Decorator: add ``fn() -> dict`` to the registry under ``name`` (unique), for the lesson whose folder defines
    ``fn`` (its ``LESSON.id``).

    ``targets``: optional ``targets(result) -> list of target(...)``, evaluated on what ``fn`` (or a lesson, through
    :func:`record`) measured; it gets a copy of the result and may add derived figures to it."""
    def wrap(fn):
        from . import lessons

        if name in _REGISTRY and _REGISTRY[name]["fn"] is not fn:
            raise ValueError(f"benchmark {name!r} is registered twice")
        lesson = lessons.of_module(fn.__module__)
        if lesson is None:
            raise ValueError(f"benchmark {name!r}: register it in a lesson's bench.py (gpucourse/lessons/lNN_topic/), "
                             f"not in {fn.__module__}")
        _REGISTRY[name] = {"fn": fn, "lesson": lesson.id, "gpu_only": gpu_only, "targets": targets}
        return fn
    return wrap


def evaluate(name: str, result: dict) -> dict:
    """``result`` with the registered targets of benchmark ``name`` evaluated into ``result["targets"]``."""
    entry = registry()[name]
    res = dict(result)
    if entry["targets"] is not None:
        res["targets"] = list(res.get("targets", [])) + list(entry["targets"](res))
    res["lesson"] = entry["lesson"]
    return res


def format_targets(res: dict, indent: str = "  ") -> str:
    """One line per target of ``res``: met or MISSED, the measured value and the goal."""
    lines = []
    for t in res.get("targets", []):
        lines.append(f"{indent}[{'met' if t['met'] else 'MISSED'}] {t['name']}: {t['value']:.3g} (target {t['op']} "
                     f"{t['goal']:g})")
    return "\n".join(lines)


def record(name: str, result: dict, show: bool = True) -> dict:
    """A lesson measured benchmark ``name`` itself: evaluate and (``show``) print its targets, and save the result
    when ``$GPUCOURSE_RECORD`` names a JSON file. Only GPU measurements are benchmarks: in CPU mode this returns
    ``result`` unchanged and prints nothing. Returns the result with its targets."""
    if name not in registry():
        raise KeyError(f"unknown benchmark {name!r}; known: {sorted(registry())}")
    if not device.on_gpu():
        return result
    res = evaluate(name, result)
    res["measured_in"] = "notebook"
    if show and res.get("targets"):
        print(f"{name} targets (course reference, H100):\n{format_targets(res)}")
    path = os.environ.get("GPUCOURSE_RECORD")
    if path:
        merge_into(path, name, res)
    return res


def run_in_child(name: str, timeout_s: float = 300) -> dict:
    """Run benchmark ``name`` in a child Python process and return its result (as its function returned it, for
    :func:`record`). For benchmarks that load code the course does not control (torchao's native kernels,
    ``torch.compile``): if that code crashes the process or hangs, the notebook's kernel lives on and this raises
    ``RuntimeError`` with the child's last lines. The child's progress lines are passed through as they come."""
    import subprocess
    import tempfile
    import threading

    if name not in registry():
        raise KeyError(f"unknown benchmark {name!r}; known: {sorted(registry())}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        code = ("import json, sys, gpucourse, gpucourse.benchmarks as b; "
                f"r = b.registry()[{name!r}]['fn'](); json.dump(r, open({out!r}, 'w'), default=str)")
        env = dict(os.environ)
        env.pop("GPUCOURSE_RECORD", None)  # the parent records the result, once
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        tail: list = []
        deadline = time.monotonic() + timeout_s

        def pump():
            for line in proc.stdout:
                tail.append(line.rstrip())
                del tail[:-20]
                print(line, end="", flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"benchmark {name} did not finish in {timeout_s:.0f} s (child process killed); its "
                               f"last lines:\n" + "\n".join(tail[-8:])) from None
        reader.join(timeout=5)
        if proc.returncode != 0 or not os.path.exists(out):
            how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}")
            raise RuntimeError(f"benchmark {name} failed in its child process ({how}); its last lines:\n" +
                               "\n".join(tail[-8:]))
        with open(out) as f:
            return json.load(f)


def results_dir() -> str:
    """The checkout's ``benchmarks/results/``: the committed recorded runs."""
    from .workbooks import ROOT

    return os.path.join(ROOT, "benchmarks", "results")


def recorded(name: str) -> dict:
    """The committed results file ``benchmarks/results/<name>``, read as JSON: what a lesson shows, labelled as
    recorded, where it cannot measure (CPU mode, counters not permitted, a single GPU)."""
    with open(os.path.join(results_dir(), name)) as f:
        return json.load(f)


def _read_results(path: str) -> dict:
    if not os.path.exists(path):
        return {"results": {}}
    with open(path) as f:
        return json.load(f)


def _write_results(path: str, doc: dict) -> None:
    """Write ``doc`` to ``path`` atomically: a run cut short leaves the old file or the new one, never half."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, path)


def merge_into(path: str, name: str, result: dict, **extra) -> None:
    """Put ``result`` under ``name`` in the results file ``path`` (other entries stay), with the date, this
    machine's versions and ``extra`` top-level fields; written atomically."""
    doc = _read_results(path)
    doc.setdefault("results", {})[name] = result
    doc["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    doc["environment"] = env.versions()
    doc.update(extra)
    _write_results(path, doc)


def set_fields(path: str, **fields) -> None:
    """Set top-level ``fields`` of the results file ``path`` (created if missing; results stay); written
    atomically."""
    doc = _read_results(path)
    doc.update(fields)
    _write_results(path, doc)


def target(name: str, value: float, goal: float, op: str = ">=") -> dict:
    """One performance target: ``value op goal`` (e.g. ratio to peer >= 0.9)."""
    cmp = {">=": operator.ge, "<=": operator.le}[op]
    return {"name": name, "value": value, "goal": goal, "op": op, "met": bool(cmp(value, goal))}


def registry() -> dict:
    from . import lessons

    lessons.submodules("bench")
    return dict(sorted(_REGISTRY.items(), key=lambda kv: (kv[1]["lesson"], kv[0])))


def run(names=None, out: str | None = None, log=print, on_result=None) -> dict:
    """Run the named benchmarks (all by default) and return (and optionally write) the results document.

    ``on_result(name, result)`` is called after each benchmark, so a caller can save what is done before a long
    run is cut short."""
    reg = registry()
    unknown = set(names or []) - set(reg)
    if unknown:
        raise KeyError(f"unknown benchmark(s): {sorted(unknown)}; known: {sorted(reg)}")
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "environment": env.versions(), "results": {}}
    chosen = [(name, entry) for name, entry in reg.items() if not names or name in names]
    t_all = time.perf_counter()
    for k, (name, entry) in enumerate(chosen, 1):
        if entry["gpu_only"] and not device.on_gpu():
            log(f"[skip {k}/{len(chosen)}] {name}: needs a GPU (CPU mode)")
            doc["results"][name] = {"skipped": "needs a GPU"}
            continue
        log(f"[run  {k}/{len(chosen)}] {name} (lesson {entry['lesson']}) ... "
            f"({time.perf_counter() - t_all:.0f} s so far)")
        t0 = time.perf_counter()
        try:
            res = evaluate(name, entry["fn"]())
        except Exception:  # one broken benchmark must not lose the others' results
            res = {"error": traceback.format_exc()}
            log(res["error"])
        res["lesson"] = entry["lesson"]
        res["seconds"] = round(time.perf_counter() - t0, 2)
        doc["results"][name] = res
        log(f"[done] {name} in {res['seconds']:.0f} s" + (" (error)" if "error" in res else ""))
        if on_result is not None:
            on_result(name, res)
    log(summary(doc))
    if out:
        with open(out, "w") as f:
            json.dump(doc, f, indent=1, default=str)
        log(f"wrote {out}")
    return doc


def summary(doc: dict) -> str:
    lines = [f"benchmarks on {env.fingerprint(doc['environment'])}"]
    for name, res in doc["results"].items():
        if "skipped" in res:
            lines.append(f"  {name}: skipped ({res['skipped']})")
        elif "error" in res:
            lines.append(f"  {name}: ERROR")
        elif res.get("targets"):
            lines.append(f"  {name}:")
            lines.append(format_targets(res, indent="    "))
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
