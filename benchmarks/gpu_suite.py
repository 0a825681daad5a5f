#!/usr/bin/env python3
"""The GPU suite: on a machine with a CUDA GPU, run everything that CI (no GPU) cannot, in one go.

Steps, in this order (cheapest and most important first, so a run cut short keeps the rest):

1. `gpucourse doctor --measure`           -> benchmarks/results/<gpu>-doctor.txt
2. the registered benchmarks              -> benchmarks/results/<gpu>.json (merged: other entries stay)
   Lessons that measure a benchmark in their own cells hand it to gpucourse.benchmarks.record, which merges it
   into the same file; when those notebooks run (step 3), such benchmarks are left to them, not measured twice.
3. the notebooks, executed on the GPU      -> in place (lessons and solutions keep these outputs when committed;
                                              exercises are only run)
4. the grader on tests/submissions/<id>   -> benchmarks/results/<gpu>-grade-<id>.json (only with --grade)
5. the test suite, `gpu` tests included    -> benchmarks/results/<gpu>-pytest.txt
6. the run's summary (notebook seconds and status, tests passed, ...) -> "suite" in benchmarks/results/<gpu>.json;
   a notebook whose Restart & Run All takes over NOTEBOOK_BUDGET_S (3 minutes) fails the suite, and the figures
   of notebooks this run did not execute are kept from earlier runs

In pieces: ``--part K/N`` runs the K-th of N parts of the selected steps, dealt so that the parts take about the same
time by the durations earlier runs recorded (``--list`` prints a part's steps without running them). Each finished
step is written to ``benchmarks/results/.<gpu>-progress.json`` at once; ``--resume`` skips the steps that a cut-short
run of the same selection and part finished.

As another GPU: ``--capability T4`` (or A100, 8.0...) runs the selected notebooks (and tests, unless skipped) with
$GPUCOURSE_CAPABILITY set, so every lesson chooses what that GPU has (fp16 for bf16, no TF32 or FP8) while its
kernels run on this one. Nothing is written back or recorded; ``benchmarks/results/<gpu>-as-<capability>.json`` gets
each notebook's status and the lines its outputs print about the lowered capability (each fallback and skip's why).

Usage: python benchmarks/gpu_suite.py [options] (``--help`` lists them); ``--archive PATH`` also packs every file
the suite wrote into one .tar.gz (handy when the GPU machine is remote).
Exit status: non-zero if the tests failed, a notebook raised, a submission was misgraded or a benchmark errored.
"""
from __future__ import annotations

import argparse
import glob
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOK_BUDGET_S = 180  # Restart & Run All of any notebook on the course's GPU (issue #18): over it, the suite fails


def notebook_summary(seconds: dict, status: dict) -> dict:
    """The suite's notebook fields from every notebook's recorded seconds and status (this run's and earlier
    ones'): which are over the budget, and whether all ran and fit. Used here and by merge_results.py."""
    over = {nb: sec for nb, sec in seconds.items() if sec > NOTEBOOK_BUDGET_S}
    return {"notebook_seconds": seconds, "notebook_status": status, "notebooks_over_budget": over,
            "notebooks_ok": not over and all(v == "ok" for v in status.values())}


def step(title: str) -> float:
    print(f"\n=== {title}", flush=True)
    return time.perf_counter()


def run_tests(tag: str, pytest_args: list) -> tuple:
    t0 = step("tests: pytest " + " ".join(pytest_args))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *pytest_args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    log = f"$ pytest {' '.join(cmd[3:])}   (exit code {out.returncode})\n" + out.stdout + out.stderr
    path = RESULTS / f"{tag}-pytest.txt"
    path.write_text(log)
    print("\n".join(log.strip().splitlines()[-15:]))
    print(f"[{time.perf_counter() - t0:.0f} s] -> {path.relative_to(ROOT)}")
    return out.returncode == 0, [path]


SITE_PACKAGES = re.compile(r"(/[\w.+-]+)+/(site-packages|dist-packages)/")
RECORD_CALL = re.compile(r"""record\(\s*["'](\w+)["']""")


def _strip_paths(nb) -> None:
    """Committed outputs must not hold this machine's paths (printed text, warnings, tracebacks of errors)."""
    # Folders on $PYTHONPATH hold packages too (the GPU machine's carried wheels are installed into one); a child
    # process's warnings print them.
    extra = [d.rstrip("/") for d in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if os.path.isabs(d) and os.path.realpath(d) != str(ROOT)]

    def clean(text: str) -> str:
        text = SITE_PACKAGES.sub("<site-packages>/", text)
        for d in extra:
            text = text.replace(d + "/", "<site-packages>/")
        return text.replace(str(ROOT), "<repo>")

    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = clean(output["text"])
            if "traceback" in output:
                output["traceback"] = [clean(line) for line in output["traceback"]]


def notebook_paths(patterns: list) -> list:
    """The notebooks the globs ``patterns`` (relative to the repository) select, in order."""
    paths = []
    for pattern in patterns:
        paths += sorted(p for p in glob.glob(str(ROOT / pattern)) if "/.ipynb_checkpoints/" not in p)
    return paths


def recorded_by(paths: list) -> set:
    """Names of the benchmarks that these notebooks measure in their own cells and hand to
    ``gpucourse.benchmarks.record`` (which writes them into the results file)."""
    from gpucourse.workbooks import code_cells

    names = set()
    for path in paths:
        for source in code_cells(path):
            names.update(RECORD_CALL.findall(source))
    return names


def notebook_client(nb, **kwargs):
    """An nbclient ``NotebookClient`` whose wait for a cell's reply cannot miss it.

    With a cell that displays ipywidgets, nbclient's wait for the kernel's execute_reply sometimes blocks until the
    cell's timeout although the kernel has replied and sits idle (jupyter/nbclient#312; lesson 03's explorer cell on
    the H100, ``lab/explore_memory03_kernel.py``). Here the shell channel is polled in steps of one second until the
    same deadline, so a reply is picked up within a second of its arrival."""
    import queue

    from nbclient import NotebookClient
    from nbclient.util import ensure_async

    class Client(NotebookClient):
        async def async_start_new_kernel_client(self):
            kc = await super().async_start_new_kernel_client()
            channel = kc.shell_channel
            get_msg = channel.get_msg

            async def get_msg_in_steps(timeout=None, **kw):
                deadline = None if timeout is None else time.monotonic() + timeout
                while True:
                    left = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
                    try:
                        return await ensure_async(get_msg(timeout=left, **kw))
                    except queue.Empty:
                        if deadline is not None and time.monotonic() >= deadline:
                            raise

            channel.get_msg = get_msg_in_steps
            return kc

    return Client(nb, **kwargs)


def capability_lines(nb, limit: tuple) -> list:
    """The lines a notebook's outputs print that name the lowered capability (``sm_75``): its fallbacks and skips."""
    mark = f"sm_{limit[0]}{limit[1]}"
    lines = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text") or (out.get("data") or {}).get("text/plain") or ""
            text = "".join(text) if isinstance(text, list) else str(text)
            lines += [ln.strip()[:400] for ln in text.splitlines() if mark in ln and ln.strip() not in lines]
    return lines


def run_notebooks(pattern: str, saved=lambda path: None, limit: tuple | None = None) -> tuple:
    import nbformat
    from nbclient.exceptions import CellExecutionError

    t0 = step("notebooks")
    ok, written, timings = True, [], {}
    paths = notebook_paths([pattern])
    for k, p in enumerate(paths, 1):
        rel = os.path.relpath(p, ROOT)
        print(f"  [{k}/{len(paths)}] {rel} ... ({time.perf_counter() - t0:.0f} s so far)", flush=True)
        nb = nbformat.read(p, as_version=4)
        client = notebook_client(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": ROOT}})
        t = time.perf_counter()
        try:
            client.execute()
            status = "ok"
        except CellExecutionError as e:
            ok, status = False, "FAILED: " + str(e).strip().splitlines()[-1][:300]
        timings[rel] = round(time.perf_counter() - t, 1)
        print(f"  {rel}: {status} ({timings[rel]} s)", flush=True)
        if limit is not None:  # run as another GPU: report what it printed about that, write nothing back
            timings[rel] = {"seconds": timings[rel], "status": status, "capability_lines": capability_lines(nb, limit)}
            continue
        if rel.startswith("exercises/"):
            continue  # exercises ship without outputs; executing them only proves they run
        _strip_paths(nb)
        nbformat.write(nb, p)
        written.append(Path(p))
        saved(Path(p))  # archived at once: a run cut short keeps the notebooks already done
    print(f"[{time.perf_counter() - t0:.0f} s]")
    return ok, written, timings


def run_doctor(tag: str) -> list:
    t0 = step("doctor --measure")
    out = subprocess.run([sys.executable, "-m", "gpucourse.cli", "doctor", "--measure"], cwd=ROOT,
                         capture_output=True, text=True)
    path = RESULTS / f"{tag}-doctor.txt"
    path.write_text(out.stdout + out.stderr)
    print(out.stdout + out.stderr)
    print(f"[{time.perf_counter() - t0:.0f} s]")
    return [path]


def run_grader(tag: str, exercise: str) -> tuple:
    """Grade every known submission for ``exercise`` on this GPU; the JSON shows each one's status and speed."""
    t0 = step(f"grader: tests/submissions/{exercise}")
    path = RESULTS / f"{tag}-grade-{exercise}.json"
    folder = f"tests/submissions/{exercise}"  # relative: no machine paths; grade expands it (expected.py skipped)
    # stderr (a line per submission as it finishes) goes to the log as it comes; the report (stdout) at the end
    out = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", exercise, folder, "--jobs", "4",
                          "--timeout", "90", "--json", str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    print(out.stdout[-6000:])
    print(f"[{time.perf_counter() - t0:.0f} s] -> {path.relative_to(ROOT)}")
    return out.returncode == 0, [path] if path.exists() else []


def run_benchmarks(tag: str, names: list, saved=lambda: None) -> tuple:
    """Run the benchmarks ``names``, merging each result into ``<tag>.json`` as soon as it is done (earlier entries
    for other benchmarks stay), and call ``saved()`` after each write."""
    from gpucourse import benchmarks

    t0 = step("benchmarks")
    path = RESULTS / f"{tag}.json"

    def write(name, res):
        benchmarks.merge_into(str(path), name, res)
        saved()

    run = benchmarks.run(names, out=None, on_result=write)
    ok = not any("error" in r for r in run["results"].values())
    print(f"[{time.perf_counter() - t0:.0f} s] -> {path.relative_to(ROOT)}")
    return ok, [path]


UNIT_DEFAULT_S = {"doctor": 20, "bench": 30, "notebook": 60, "grade": 40, "tests": 400}


def split_parts(units: list, n: int, seconds: dict) -> list:
    """Deal ``units`` into ``n`` parts of about equal expected time (longest first, each to the lightest part),
    keeping each part's units in their original order. ``seconds`` holds known durations by unit key."""
    est = {u: seconds.get(u, UNIT_DEFAULT_S[u.split(":", 1)[0]]) for u in units}
    parts, load = [[] for _ in range(n)], [0.0] * n
    for u in sorted(units, key=lambda u: -est[u]):
        i = load.index(min(load))
        parts[i].append(u)
        load[i] += est[u]
    order = {u: i for i, u in enumerate(units)}
    return [sorted(p, key=order.get) for p in parts]


def parse_part(text: str) -> tuple:
    m = re.fullmatch(r"(\d+)/(\d+)", text or "")
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"--part takes K/N with 1 <= K <= N (e.g. 2/3), not {text!r}")
    return int(m.group(1)), int(m.group(2))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-tests", action="store_true", help="do not run pytest")
    ap.add_argument("--skip-notebooks", action="store_true", help="do not execute notebooks")
    ap.add_argument("--skip-benchmarks", action="store_true", help="run no benchmark (notebooks record theirs)")
    ap.add_argument("--notebooks", nargs="+", default=["notebooks/*.ipynb", "solutions/*.ipynb", "exercises/*.ipynb"],
                    help="globs relative to the repo (default: every notebook)")
    ap.add_argument("--bench", nargs="*", default=[], help="benchmarks to run (default: all registered); those the "
                    "selected notebooks record are left to them")
    ap.add_argument("--pytest-args", default="tests", help="arguments for pytest (default: 'tests', everything)")
    ap.add_argument("--grade", nargs="*", default=[], help="exercises whose tests/submissions/<id> to grade")
    ap.add_argument("--part", type=parse_part, default=(1, 1), metavar="K/N",
                    help="run only the K-th of N parts of the selected work, balanced by earlier timings (1/3...)")
    ap.add_argument("--resume", action="store_true", help="skip the steps an earlier run of this selection finished")
    ap.add_argument("--list", action="store_true", help="print the steps this selection and part would run, and stop")
    ap.add_argument("--tag", help="results file name (default: this GPU's, e.g. h100); with --list on a machine "
                                  "without that GPU, the earlier timings that balance the parts come from it")
    ap.add_argument("--capability", help="run as this GPU would (T4, A100, 8.0...): see the module docstring")
    ap.add_argument("--archive", help="also write every produced file into this .tar.gz (refreshed after each step)")
    args = ap.parse_args(argv)

    limit = None
    if args.capability:
        os.environ["GPUCOURSE_CAPABILITY"] = args.capability  # before gpucourse is imported; inherited by kernels
        args.skip_benchmarks = True
    import gpucourse
    from gpucourse import benchmarks, device, specs

    if args.capability:
        try:
            limit = device.capability_limit()
        except ValueError as exc:
            print(exc)
            return 2

    if not gpucourse.on_gpu() and not args.list:
        print("The GPU suite needs a CUDA GPU; this machine runs in CPU mode. Use `make test` here.")
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    tag = args.tag or specs.slug()
    if limit is not None:
        tag += f"-as-{args.capability.lower().replace('.', '')}"
    results = RESULTS / f"{tag}.json"
    earlier_suite = benchmarks._read_results(str(results)).get("suite", {})

    # The work, as units in the order they run (cheapest and most important first), then this part of it.
    nb_paths = [] if args.skip_notebooks else [os.path.relpath(p, ROOT) for p in notebook_paths(args.notebooks)]
    units = ["doctor:"]
    if not args.skip_benchmarks:
        names = args.bench or list(benchmarks.registry())
        # Lessons that measure a registered benchmark in their own cells hand it to gpucourse.benchmarks.record,
        # which merges it into the results file: one measurement for the lesson's outputs and the committed JSON.
        in_notebooks = recorded_by([str(ROOT / p) for p in nb_paths])
        left = sorted(n for n in names if n in in_notebooks)
        if left:
            print("measured by the selected notebooks, not as benchmarks: " + ", ".join(left))
        units += [f"bench:{n}" for n in names if n not in in_notebooks]
    units += [f"notebook:{p}" for p in nb_paths] + [f"grade:{e}" for e in args.grade]
    if not args.skip_tests:
        units.append("tests:" + args.pytest_args)
    known = {f"notebook:{nb}": s for nb, s in earlier_suite.get("notebook_seconds", {}).items()}
    known.update(earlier_suite.get("unit_seconds", {}))
    k, n = args.part
    mine = split_parts(units, n, known)[k - 1]

    progress_path = RESULTS / f".{tag}-progress.json"
    selection = {"units": units, "part": f"{k}/{n}"}
    progress = {"selection": selection, "done": {}}
    if args.resume and progress_path.exists():
        old = json.loads(progress_path.read_text())
        if old.get("selection") == selection:
            progress = old
        else:
            print("--resume: the progress file is for another selection or part; starting over")
    skipped = [u for u in mine if u in progress["done"]]
    todo = [u for u in mine if u not in progress["done"]]
    print(f"part {k}/{n}: {len(mine)} of {len(units)} steps" + (f", {len(skipped)} done earlier" if skipped else ""))
    for u in mine:
        print(("  done  " if u in skipped else "  run   ") + u)
    if args.list:
        return 0

    files, ok, extra = [progress_path], True, {}
    if any(u.startswith(("bench:", "notebook:")) for u in todo):
        files.append(results)  # benchmarks and notebooks write into it as they go: archived from the first step
    for u in skipped:
        ok &= progress["done"][u]["ok"]

    def archive():
        if not args.archive:
            return
        with tarfile.open(args.archive, "w:gz") as tar:
            for f in files:
                if os.path.exists(f):
                    tar.add(f, arcname=os.path.relpath(f, ROOT))
            tar.addfile(tarfile.TarInfo("SUITE_OK" if ok else "SUITE_FAILED"), io.BytesIO(b""))

    def finished(unit, good, seconds, **info):
        progress["done"][unit] = {"ok": bool(good), "seconds": round(seconds, 1), **info}
        progress_path.write_text(json.dumps(progress, indent=1))
        archive()

    def keep(path):
        if path not in files:
            files.append(path)
        archive()

    if limit is None:
        os.environ["GPUCOURSE_RECORD"] = str(results)  # notebooks record their benchmarks into the results file
    for unit in todo:
        kind, name = unit.split(":", 1)
        t = time.perf_counter()
        info = {}
        if kind == "doctor":
            good, f = True, run_doctor(tag)
        elif kind == "bench":
            good, f = run_benchmarks(tag, [name], saved=archive)
        elif kind == "notebook":
            good, f, timings = run_notebooks(name, saved=keep, limit=limit)
            if limit is not None:
                info["as_capability"] = timings.get(name)
                timings = {n: v["seconds"] for n, v in timings.items()}
            info["notebook_seconds"] = timings.get(name, round(time.perf_counter() - t, 1))
        elif kind == "grade":
            good, f = run_grader(tag, name)
        else:
            good, f = run_tests(tag, name.split())
            extra["tests_passed"] = good
        for path in f:
            keep(path)
        ok &= good
        finished(unit, good, time.perf_counter() - t, **info)

    # The run's summary. Seconds and status of notebooks this run did not execute stay as an earlier run recorded
    # them (a run of one lesson must not erase the others'); this run's figures (and earlier parts', on --resume)
    # replace their own.
    done_nbs = {u.split(":", 1)[1]: d for u, d in progress["done"].items() if u.startswith("notebook:")}
    if done_nbs:
        seconds = {**earlier_suite.get("notebook_seconds", {}),
                   **{nb: d["notebook_seconds"] for nb, d in done_nbs.items()}}
        status = {**earlier_suite.get("notebook_status", {}),
                  **{nb: "ok" if d["ok"] else "failed" for nb, d in done_nbs.items()}}
        extra.update(notebook_summary(seconds, status))
        if limit is not None:
            extra["capability"] = {"as": args.capability, "sm": f"sm_{limit[0]}{limit[1]}",
                                   "notebooks": {nb: d.get("as_capability") for nb, d in done_nbs.items()}}
        for nb, sec in extra["notebooks_over_budget"].items():
            if nb in done_nbs:
                print(f"  {nb}: {sec} s, over the {NOTEBOOK_BUDGET_S} s budget for a notebook's Restart & Run All")
                ok = False
    if extra:
        unit_seconds = {**earlier_suite.get("unit_seconds", {}),
                        **{u: d["seconds"] for u, d in progress["done"].items()
                           if not u.startswith("notebook:")}}
        extra["unit_seconds"] = unit_seconds
        extra["last_part"] = f"{k}/{n}"
        if "tests_passed" not in extra and "tests_passed" in earlier_suite:
            extra["tests_passed"] = earlier_suite["tests_passed"]
        benchmarks.set_fields(str(results), suite={**earlier_suite, **extra})
        keep(results)
    archive()
    print("\nGPU suite" + (f" part {k}/{n}" if n > 1 else "") + ":", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
